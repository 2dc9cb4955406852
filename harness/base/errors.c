/* harness/base/errors.c: exit codes for statuses, and messages that name
 * the file, line and field (see errors.h). */
#include "errors.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "status.h"

int hx_exit_for_input(int status) {
    return status == ENG_OK ? HX_EXIT_OK : status == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
}

int hx_exit_for_status(int status) {
    switch (status) {
    case ENG_OK:              return HX_EXIT_OK;
    case ENG_ERR_ARG:
    case ENG_ERR_FORMAT:
    case ENG_ERR_UNSUPPORTED: return HX_EXIT_USAGE;
    default:                  return HX_EXIT_INTERNAL;
    }
}

void hx_errf_at(char *err, size_t errlen, const char *path, int64_t line, const char *field, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *p = path ? path : "-";
    bool has_field = field && field[0];
    if (path && !path[0])  /* no file (an HTTP body): "FIELD: what" */
        snprintf(err, errlen, "%s%s%s", has_field ? field : "", has_field ? ": " : "", msg);
    else if (line > 0)
        snprintf(err, errlen, "%s:%lld: %s%s%s", p, (long long)line, has_field ? field : "", has_field ? ": " : "", msg);
    else
        snprintf(err, errlen, "%s: %s%s%s", p, has_field ? field : "", has_field ? ": " : "", msg);
}
