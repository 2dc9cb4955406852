/*
 * harness/transcripts/jsonl.c: JSONL input hygiene and safe output (see jsonl.h).
 *
 * Big integers: jansson stores integers as json_int_t (int64) and fails a
 * document holding a larger one. Only then is the line scanned (outside
 * strings) for integer literals out of range, each rewritten as a real
 * literal, and parsed again, so the common path costs nothing.
 */
#include "jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Input: encodings, big integers, pretty-printed documents

int64_t hx_jsonl_start(const char *data, size_t n, const char *path, char *err, size_t errlen) {
    const unsigned char *u = (const unsigned char *)data;
    const char *p = path ? path : "-";
    if (n >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF) return 3;
    bool utf16 = n >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF));
    bool utf32 = n >= 4 && ((u[0] == 0 && u[1] == 0 && u[2] == 0xFE && u[3] == 0xFF));
    size_t nul = 0;
    for (size_t i = 0; i < n && i < 64; i++) nul += u[i] == 0;
    if (utf16 || utf32 || nul > 0) {
        eng_errf(err, errlen,
                 "%s: the file is %s, not UTF-8 text; convert it first, e.g. iconv -f %s -t UTF-8 %s > converted.jsonl",
                 p, utf32 ? "UTF-32 encoded" : utf16 ? "UTF-16 encoded" : "binary or UTF-16/32 (it holds NUL bytes)",
                 utf32 ? "UTF-32" : "UTF-16", p);
        return -1;
    }
    return 0;
}

/* Copies s with every out-of-range integer literal (outside strings) turned
 * into a real literal; *n_big counts them. NULL on OOM. */
static char *rewrite_big(const char *s, size_t len, size_t *n_big) {
    eng_buf b = {0};
    bool in_str = false;
    size_t i = 0, big = 0;
    int rc = ENG_OK;
    while (i < len && !rc) {
        char c = s[i];
        if (in_str) {
            size_t j = i;
            while (j < len && s[j] != '"' && s[j] != '\\') j++;
            if (j < len && s[j] == '\\') j = j + 2 <= len ? j + 2 : len;
            else if (j < len) { j++; in_str = false; }
            rc = eng_buf_append(&b, s + i, j - i);
            i = j;
            continue;
        }
        if (c == '"') {
            in_str = true;
            rc = eng_buf_append(&b, s + i, 1);
            i++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i + (c == '-');
            while (j < len && s[j] >= '0' && s[j] <= '9') j++;
            bool real = j < len && (s[j] == '.' || s[j] == 'e' || s[j] == 'E');
            rc = eng_buf_append(&b, s + i, j - i);
            size_t digits = j - i - (c == '-');
            if (!rc && !real && digits >= 19) {
                char tmp[64];
                bool out = digits > 19;
                if (!out) {
                    memcpy(tmp, s + i, j - i);
                    tmp[j - i] = '\0';
                    errno = 0;
                    (void)strtoll(tmp, NULL, 10);
                    out = errno == ERANGE;
                }
                if (out) {
                    rc = eng_buf_append(&b, ".0", 2);
                    big++;
                }
            }
            i = j;
            continue;
        }
        rc = eng_buf_append(&b, s + i, 1);
        i++;
    }
    if (rc) {
        eng_buf_free(&b);
        return NULL;
    }
    if (!b.data && eng_buf_append(&b, "", 0)) return NULL;
    if (n_big) *n_big += big;
    return b.data;
}

json_t *hx_jsonl_load(const char *s, size_t len, size_t *n_big, json_error_t *je) {
    json_t *j = json_loadb(s, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, je);
    if (j || !strstr(je->text, "too big")) return j;
    size_t big = 0;
    char *t = rewrite_big(s, len, &big);
    if (!t) return NULL;
    json_error_t je2;
    j = json_loadb(t, strlen(t), JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je2);
    free(t);
    if (j && n_big) *n_big += big;
    return j;  /* on failure *je keeps the first error, which names the original column */
}

void hx_jsonl_explain(const char *data, size_t n, const char *path, int64_t line, int column, const char *text,
                      char *err, size_t errlen) {
    const char *p = path ? path : "-";
    char base[512];
    snprintf(base, sizeof base, "%s:%lld: invalid JSON at column %d: %s", p, (long long)line, column, text);
    json_error_t je;
    json_t *whole = json_loadb(data, n, JSON_DECODE_ANY, &je);
    if (whole && (json_is_object(whole) || json_is_array(whole)) && memchr(data, '\n', n)) {
        int64_t lines = 0;
        for (size_t i = 0; i < n; i++) lines += data[i] == '\n';
        bool arr = json_is_array(whole);
        eng_errf(err, errlen,
                 "%s: the file is one pretty-printed JSON %s (%lld lines), not JSONL (one JSON object per line); "
                 "convert it with: jq -c %s %s",
                 p, arr ? "array" : "object", (long long)lines + 1, arr ? "'.[]'" : ".", p);
        json_decref(whole);
        return;
    }
    json_decref(whole);
    /* the first line alone is an opening brace: a pretty-printed file that is not valid as a whole */
    size_t i = 0;
    while (i < n && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n')) i++;
    size_t k = i;
    if (k < n && (data[k] == '{' || data[k] == '[')) {
        k++;
        while (k < n && (data[k] == ' ' || data[k] == '\t' || data[k] == '\r')) k++;
        if (k < n && data[k] == '\n') {
            eng_errf(err, errlen, "%s (the file looks pretty-printed: JSONL needs one complete JSON object per line)",
                     base);
            return;
        }
    }
    eng_errf(err, errlen, "%s", base);
}

static bool find_big(const json_t *j, char *buf, size_t n, size_t off) {
    if (json_is_real(j)) {
        double v = json_real_value(j); /* every double of this size is an integer */
        return v >= 9223372036854775808.0 || v < -9223372036854775808.0;
    }
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            int w = snprintf(buf + off, off < n ? n - off : 0, ".%s", k);
            if (find_big(v, buf, n, off + (w > 0 ? (size_t)w : 0))) return true;
            if (off < n) buf[off] = '\0';
        }
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) {
            int w = snprintf(buf + off, off < n ? n - off : 0, "[%zu]", i);
            if (find_big(json_array_get(j, i), buf, n, off + (w > 0 ? (size_t)w : 0))) return true;
            if (off < n) buf[off] = '\0';
        }
    }
    return false;
}

bool hx_json_find_big(const json_t *j, const char *prefix, char *buf, size_t n) {
    if (!buf || n == 0) return false;
    int w = snprintf(buf, n, "%s", prefix ? prefix : "");
    size_t off = w > 0 ? (size_t)w : 0;
    if (off >= n) off = n - 1;
    return j && find_big(j, buf, n, off);
}

// ----------------------------------------------------------------------------
// Output: refuse non-regular targets, remove the temporary file on a signal

int hx_output_check(const char *path, char *err, size_t errlen) {
    if (!path || !path[0]) {
        eng_errf(err, errlen, "the output path is empty");
        return ENG_ERR_ARG;
    }
    struct stat st;
    if (lstat(path, &st) != 0) {  /* absent: its directory must exist (docs/exit-codes.md: exit 2, not 3) */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash) return ENG_OK;  /* the current directory */
        slash[slash == dir ? 1 : 0] = '\0';
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            eng_errf(err, errlen, "%s: cannot create it: %s is not a directory", path, dir);
            return ENG_ERR_ARG;
        }
        return ENG_OK;
    }
    const char *what = eng_file_kind(st.st_mode);
    if (what) {
        eng_errf(err, errlen, "%s: is %s, not a regular file; refusing to replace it (%s)", path, what,
                 S_ISLNK(st.st_mode) ? "name the link's target instead" : "choose a regular file");
        return ENG_ERR_ARG;
    }
    return ENG_OK;
}

void (*hx_write_atomic_chunk_hook)(const char *tmp_path) = NULL;

static char g_tmp[4096];
static volatile sig_atomic_t g_tmp_live = 0;

static void on_signal(int sig) {
    if (g_tmp_live) unlink(g_tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

int hx_write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    int rc = hx_output_check(path, err, errlen);
    if (rc) return rc;
    if (snprintf(g_tmp, sizeof g_tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof g_tmp) {
        eng_errf(err, errlen, "%s: path too long", path);
        return ENG_ERR_ARG;
    }
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int fd = open(g_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) g_tmp_live = 1;
    rc = ENG_OK;
    if (fd < 0) {
        eng_errf(err, errlen, "%s: cannot create: %s", g_tmp, strerror(errno));
        rc = ENG_ERR_IO;
        goto out;
    }
    const char *p = data;
    for (size_t off = 0; off < n;) {
        size_t k = n - off < (1u << 20) ? n - off : (1u << 20);
        if (eng_write_all(fd, p + off, k) != 0) {
            eng_errf(err, errlen, "%s: write failed: %s", g_tmp, strerror(errno));
            rc = ENG_ERR_IO;
            break;
        }
        off += k;
        if (hx_write_atomic_chunk_hook) hx_write_atomic_chunk_hook(g_tmp);
    }
    if (!rc && fsync(fd) != 0) {
        eng_errf(err, errlen, "%s: fsync failed: %s", g_tmp, strerror(errno));
        rc = ENG_ERR_IO;
    }
    if (close(fd) != 0 && !rc) {
        eng_errf(err, errlen, "%s: close failed: %s", g_tmp, strerror(errno));
        rc = ENG_ERR_IO;
    }
    if (!rc && rename(g_tmp, path) != 0) {
        eng_errf(err, errlen, "%s: rename failed: %s", path, strerror(errno));
        rc = ENG_ERR_IO;
    }
    if (rc) unlink(g_tmp);
    g_tmp_live = 0;
    if (!rc) eng_fsync_dir_of(path);
out:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
