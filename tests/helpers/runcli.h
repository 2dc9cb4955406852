/*
 * tests/helpers/runcli.h: running the `kvreplay` binary from a test.
 */
#ifndef KVR_TESTS_RUNCLI_H
#define KVR_TESTS_RUNCLI_H

#include <stddef.h>

/* $BUILD/kvreplay (build/kvreplay without $BUILD) when it exists and runs, else NULL. */
const char *kvr_bin(void);
/* Runs cmd through the shell; *out (malloc'd, NUL-terminated, may be NULL)
 * gets its stdout and *n its length. Returns the exit status, or -1 when it
 * did not exit normally. */
int kvr_run(const char *cmd, char **out, size_t *n);

#endif
