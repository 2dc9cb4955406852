/* harness/base/version.c: the git revision of the build (see cli.h). The
 * Makefile passes KVR_GIT_REV to this file alone and rebuilds it when HEAD
 * moves; every other object is independent of the revision. */
#include "cli.h"

#ifndef KVR_GIT_REV
#define KVR_GIT_REV "unknown"
#endif

const char *hx_git_rev(void) { return KVR_GIT_REV; }
