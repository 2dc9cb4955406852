/* harness/bench/bench_util.c: see bench_util.h. */
#include "bench_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "status.h"

int hx_bench_bad_arg(const char *cmd, const char *arg, char *err, size_t errlen) {
    eng_errf(err, errlen, "%s: %s '%s' (see kvreplay %s --help)", cmd,
             arg[0] == '-' ? "unknown option" : "unexpected argument", arg, cmd);
    return ENG_ERR_ARG;
}

int hx_bench_args(const hx_option *table, void *opts, int argc, char **argv, const char *cmd, char *err,
                  size_t errlen) {
    for (int i = 1; i < argc; i++) {
        int r = hx_options_take(table, opts, argc, argv, &i, err, errlen);
        if (r < 0) return r;
        if (r == 0) return hx_bench_bad_arg(cmd, argv[i], err, errlen);
    }
    return ENG_OK;
}

int hx_bench_failed(int rc) {
    return rc == ENG_ERR_ARG || rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED ? ENG_ERR_IO : rc;
}

int hx_bench_print_json(void *v) {
    json_t *o = v;
    char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!txt) return ENG_ERR_NOMEM;
    puts(txt);
    free(txt);
    return ENG_OK;
}

int hx_bench_flush(const char *cmd, char *err, size_t errlen) {
    if (fflush(stdout) == 0) return ENG_OK;
    eng_errf(err, errlen, "%s: cannot write stdout: %s", cmd, strerror(errno));
    return ENG_ERR_IO;
}
