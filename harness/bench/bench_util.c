/* harness/bench/bench_util.c: see bench_util.h. */
#include "bench_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "status.h"

int hx_bench_print_json(void *v) {
    json_t *o = v;
    char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!txt) return ENG_ERR_NOMEM;
    puts(txt);
    free(txt);
    return ENG_OK;
}
