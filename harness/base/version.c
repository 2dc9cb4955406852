/* harness/base/version.c: the build's git revision and the process's
 * command line (see version.h). The Makefile passes KVR_GIT_REV to this file
 * alone and rebuilds it when HEAD moves; no other object depends on it. */
#include "version.h"

#include <stdio.h>

#ifndef KVR_GIT_REV
#define KVR_GIT_REV "unknown"
#endif

const char *hx_git_rev(void) { return KVR_GIT_REV; }

static char g_argv[8192];

void hx_set_argv(int argc, char **argv) {
    size_t off = 0;
    g_argv[0] = '\0';
    for (int i = 0; i < argc && off < sizeof g_argv - 1; i++) {
        int k = snprintf(g_argv + off, sizeof g_argv - off, "%s%s", i ? " " : "", argv[i]);
        if (k < 0) break;
        off += (size_t)k;
    }
}

const char *hx_argv_joined(void) { return g_argv; }
