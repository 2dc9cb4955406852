/*
 * engine/util.c: status strings, error formatting, atomic writes, clock, buffers.
 */
#include "status.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *eng_status_str(int status) {
    switch (status) {
    case ENG_OK:              return "ok";
    case ENG_ERR_IO:          return "I/O error";
    case ENG_ERR_FORMAT:      return "malformed input";
    case ENG_ERR_TYPE:        return "wrong type";
    case ENG_ERR_NOT_FOUND:   return "not found";
    case ENG_ERR_RANGE:       return "out of range";
    case ENG_ERR_NOMEM:       return "out of memory";
    case ENG_ERR_MISMATCH:    return "fingerprint mismatch";
    case ENG_ERR_UNSUPPORTED: return "unsupported";
    case ENG_ERR_ARG:         return "invalid argument";
    default:                  return "unknown status";
    }
}

void eng_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// ----------------------------------------------------------------------------
// Atomic file writes: temp file, fsync, rename, fsync of the directory

int eng_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

const char *eng_file_kind(unsigned mode) {
    return S_ISREG(mode)    ? NULL
           : S_ISLNK(mode)  ? "a symbolic link"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

int eng_write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    struct stat st;
    const char *kind = lstat(path, &st) == 0 ? eng_file_kind(st.st_mode) : NULL;
    if (kind) {  /* a rename would replace it by a regular file */
        eng_errf(err, errlen, "%s: not a regular file (%s): an atomic write would replace it; write to a file",
                 path, kind);
        return ENG_ERR_ARG;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        eng_errf(err, errlen, "%s: path too long", path);
        return ENG_ERR_ARG;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        eng_errf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return ENG_ERR_IO;
    }
    if (eng_write_all(fd, data, n) != 0 || fsync(fd) != 0) {
        eng_errf(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return ENG_ERR_IO;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        eng_errf(err, errlen, "%s: rename failed: %s", path, strerror(errno));
        unlink(tmp);
        return ENG_ERR_IO;
    }
    eng_fsync_dir_of(path);
    return ENG_OK;
}

void eng_fsync_dir_of(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);  /* best effort: some filesystems refuse fsync on directories */
        close(dfd);
    }
}

int eng_read_file(const char *path, char **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        eng_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return ENG_ERR_IO;
    }
    eng_buf b = {0};
    char chunk[65536];
    size_t r;
    int rc = ENG_OK;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (eng_buf_append(&b, chunk, r) != ENG_OK) { rc = ENG_ERR_NOMEM; break; }
    }
    if (rc == ENG_OK && ferror(f)) {
        eng_errf(err, errlen, "%s: read failed: %s", path, strerror(errno));
        rc = ENG_ERR_IO;
    }
    fclose(f);
    if (rc != ENG_OK) { eng_buf_free(&b); return rc; }
    if (!b.data && eng_buf_append(&b, "", 0) != ENG_OK) return ENG_ERR_NOMEM;
    *out = b.data;
    *n = b.len;
    return ENG_OK;
}

double eng_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int eng_stderr_is_tty(void) { return isatty(STDERR_FILENO); }

// ----------------------------------------------------------------------------
// Growable byte buffer

int eng_buf_append(eng_buf *b, const void *data, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) return ENG_ERR_NOMEM;
        b->data = p;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return ENG_OK;
}

int eng_buf_printf(eng_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[512];
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) return ENG_ERR_ARG;
    if ((size_t)k < sizeof small) return eng_buf_append(b, small, (size_t)k);
    char *big = malloc((size_t)k + 1);
    if (!big) return ENG_ERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    int rc = eng_buf_append(b, big, (size_t)k);
    free(big);
    return rc;
}

void eng_buf_free(eng_buf *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
