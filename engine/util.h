/*
 * engine/util.h: small helpers every module needs: atomic file writes,
 * a monotonic clock, and a growable byte buffer.
 *
 * Atomic write contract: the bytes go to "PATH.tmp.PID", are fsync'd, then
 * renamed over PATH, and the directory is fsync'd; a crash at any point
 * leaves either the old file or the new one, never a partial PATH.
 */
#ifndef ENG_UTIL_H
#define ENG_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Writes all n bytes to fd, retrying short writes and EINTR. 0, or -1 with errno set. */
int eng_write_all(int fd, const void *data, size_t n);

/* What mode is when it is not a regular file ("a symbolic link", "a character device", "a FIFO",
 * ...), for messages; NULL for a regular file. */
const char *eng_file_kind(unsigned mode);
/* Writes n bytes atomically to path (PATH.tmp.PID, fsync, rename). Returns
 * ENG_OK, ENG_ERR_ARG when path exists and is not a regular file (a device
 * such as /dev/null, a FIFO, a directory or a symbolic link: the rename
 * would replace it), or ENG_ERR_IO; a message in err. */
int eng_write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);
/* fsyncs the directory that holds path (after a rename into it); best effort:
 * some filesystems refuse fsync on directories. */
void eng_fsync_dir_of(const char *path);

/* Reads a whole file into a malloc'd buffer (NUL-terminated, *n excludes the NUL).
 * The caller frees *out. Returns ENG_OK or ENG_ERR_IO / ENG_ERR_NOMEM. */
int eng_read_file(const char *path, char **out, size_t *n, char *err, size_t errlen);

/* Monotonic wall clock in seconds (CLOCK_MONOTONIC). */
double eng_now_s(void);

/* A growable byte buffer. eng_buf_free accepts NULL-initialised buffers. */
typedef struct eng_buf {
    char  *data;  /* NUL-terminated when len > 0 */
    size_t len;
    size_t cap;
} eng_buf;

int  eng_buf_append(eng_buf *b, const void *data, size_t n);  /* ENG_OK or ENG_ERR_NOMEM */
int  eng_buf_printf(eng_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void eng_buf_free(eng_buf *b);

/* True when stderr is a terminal: long runs print progress only then. */
int eng_stderr_is_tty(void);

#endif /* ENG_UTIL_H */
