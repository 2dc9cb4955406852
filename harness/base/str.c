/* harness/base/str.c: strings and the string map (see str.h). */
#include "str.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "status.h"

char *hx_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static size_t strmap_slot(const hx_strmap *m, const char *key) {
    size_t mask = m->cap - 1;
    size_t i = (size_t)XXH3_64bits(key, strlen(key)) & mask;
    while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & mask;
    return i;
}

int hx_strmap_put(hx_strmap *m, const char *key, int64_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 16;
        hx_strmap nm = {calloc(ncap, sizeof(char *)), calloc(ncap, sizeof(int64_t)), ncap, m->n};
        if (!nm.keys || !nm.vals) {
            free(nm.keys);
            free(nm.vals);
            return ENG_ERR_NOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t s = strmap_slot(&nm, m->keys[i]);
            nm.keys[s] = m->keys[i];
            nm.vals[s] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        *m = nm;
    }
    size_t s = strmap_slot(m, key);
    if (!m->keys[s]) {
        if (!(m->keys[s] = hx_strdup(key))) return ENG_ERR_NOMEM;
        m->n++;
    }
    m->vals[s] = val;
    return ENG_OK;
}

bool hx_strmap_get(const hx_strmap *m, const char *key, int64_t *val) {
    if (m->cap == 0) return false;
    size_t s = strmap_slot(m, key);
    if (!m->keys[s]) return false;
    if (val) *val = m->vals[s];
    return true;
}

void hx_strmap_free(hx_strmap *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
