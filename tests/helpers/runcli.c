/*
 * tests/helpers/runcli.c: see runcli.h.
 */
#include "runcli.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

const char *kvr_bin(void) {
    static char bin[256];
    const char *b = getenv("BUILD");
    snprintf(bin, sizeof bin, "%s/kvreplay", b ? b : "build");
    return access(bin, X_OK) == 0 ? bin : NULL;
}

int kvr_run(const char *cmd, char **out, size_t *n) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (size_t k; buf && (k = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    const int st = pclose(f);
    if (buf) buf[len] = '\0';
    if (out) *out = buf;
    else free(buf);
    if (n) *n = len;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
