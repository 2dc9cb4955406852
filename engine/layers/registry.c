/*
 * engine/layers/registry.c: the registered layer kinds. A new kind is one
 * file under engine/layers/ plus one line in eng_layer_kinds[] below; the
 * architectures it brings (its table's `archs`) are found through it.
 */
#include "internal.h"

#include <string.h>

#include "attn.h"
#include "mamba2.h"
#include "rwkv7.h"
#include "status.h"
#include "swa.h"

const eng_layer_ops *const eng_layer_kinds[] = {
    &eng_kind_attn,
    &eng_kind_swa,
    &eng_kind_mamba2,
    &eng_kind_rwkv7,
    NULL,
};

int32_t eng_layer_kind_index(const eng_layer_ops *ops) {
    for (int32_t i = 0; eng_layer_kinds[i]; i++)
        if (eng_layer_kinds[i] == ops) {
            ENG_ASSERT(i < (int32_t)(sizeof ((eng_ws *)0)->kind / sizeof(void *)));
            return i;
        }
    ENG_ASSERT(0 && "layer kind not registered");
    return -1;
}

const eng_arch *eng_arch_find(const char *name) {
    for (int32_t i = 0; eng_layer_kinds[i]; i++)
        for (const eng_arch *const *a = eng_layer_kinds[i]->archs; a && *a; a++)
            if (!strcmp((*a)->name, name)) return *a;
    return NULL;
}
