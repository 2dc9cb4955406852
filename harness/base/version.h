/*
 * harness/base/version.h: what this process is: kvreplay's version, the git
 * revision it was built from, and its command line (runs.version, git_rev,
 * argv).
 */
#ifndef HX_VERSION_H
#define HX_VERSION_H

#define KVR_VERSION "0.1.0"

/* The git revision this binary was built from (12 hex digits, "unknown"
 * outside a checkout). Only version.c holds it; the Makefile rebuilds that
 * file whenever HEAD moves, so runs.git_rev never goes stale. */
const char *hx_git_rev(void);

/* The full command line, space-joined (runs.argv); "" until hx_set_argv.
 * Static buffer, set once by main. */
const char *hx_argv_joined(void);
void        hx_set_argv(int argc, char **argv);

#endif /* HX_VERSION_H */
