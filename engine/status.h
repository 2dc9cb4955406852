/*
 * engine/status.h: status codes shared by every engine module.
 *
 * Two tiers of errors, as in ggml: a bug aborts through ENG_ASSERT with file
 * and line; bad input and I/O return one of these negative codes, and the
 * function that failed writes a one-line message (naming the file and the
 * field) into the caller's `err` buffer when it takes one.
 */
#ifndef ENG_STATUS_H
#define ENG_STATUS_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

enum eng_status {
    ENG_OK              =  0,
    ENG_ERR_IO          = -1,  /* open/read/write/mmap/fsync/rename failed */
    ENG_ERR_FORMAT      = -2,  /* malformed bytes: bad magic, truncation, bad offset */
    ENG_ERR_TYPE        = -3,  /* a value has the wrong type */
    ENG_ERR_NOT_FOUND   = -4,  /* a key, tensor or token is absent */
    ENG_ERR_RANGE       = -5,  /* a count or index is out of range */
    ENG_ERR_NOMEM       = -6,  /* allocation failed */
    ENG_ERR_MISMATCH    = -7,  /* foreign blob: fingerprint or shape differs */
    ENG_ERR_UNSUPPORTED = -8,  /* valid but not supported (type, arch, op on this memory) */
    ENG_ERR_ARG         = -9,  /* invalid argument from the caller */
};

/* Static, never NULL: "ok", "I/O error", ... ("unknown status" otherwise). */
const char *eng_status_str(int status);

/* Aborts with file and line: for broken invariants only, never for input. */
#define ENG_ASSERT(x)                                                        \
    do {                                                                     \
        if (!(x)) {                                                          \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__,       \
                    __LINE__, #x);                                           \
            abort();                                                         \
        }                                                                    \
    } while (0)

/* snprintf into an optional error buffer (err may be NULL, errlen may be 0). */
void eng_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* ENG_STATUS_H */
