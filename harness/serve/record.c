/*
 * harness/serve/record.c: --record FILE: every request the engine served,
 * appended to a transcript v2 file that `kvreplay replay` reads directly.
 *
 * Each request is one line: its session and turn (assigned by the worker,
 * worker.c), the prompt as received (before
 * --normalize), the response the client got (the recorded assistant turn,
 * teacher-forced as replay teacher-forces it), its usage, and `served`: the
 * API, the request target, the headers that shape the prompt or the session,
 * the body exactly as received, id_slot and cache_prompt. A request that
 * extends its session's previous one is a compact line (v2). A new file
 * starts with a header line.
 *
 * Atomic per request: one write() of the whole line, then fsync. A crash
 * loses at most the line in flight; a torn last line (no newline) found when
 * the file is opened again is cut off and said on stderr, and the sessions
 * of the file continue: the recorder keeps each session's last request (for
 * compact lines), and the worker continues their names and turns from it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normalize.h"
#include "serve_int.h"
#include "status.h"
#include "str.h"
#include "util.h"

struct hx_recorder {
    char       *path;
    int         fd;           /* -1: no file */
    bool        need_header;
    char       *header;       /* canonical JSON of the header object */
    hx_strmap   index;        /* session name -> index in last */
    hx_request *last;         /* (n_sessions) the last request of each session, as recorded */
    int32_t     n_sessions;
};

/* The index of session name in last, added (empty) when new; -1 on OOM. */
static int64_t session_index(hx_recorder *r, const char *name) {
    int64_t s;
    if (hx_strmap_get(&r->index, name, &s)) return s;
    hx_request *l = realloc(r->last, sizeof *l * (size_t)(r->n_sessions + 1));
    if (!l) return -1;
    r->last = l;
    memset(&r->last[r->n_sessions], 0, sizeof *r->last);
    if (hx_strmap_put(&r->index, name, r->n_sessions)) return -1;
    return r->n_sessions++;
}

/* Takes the sessions of an existing file: the last request of each. */
static int load_existing(hx_recorder *r, char *err, size_t errlen) {
    struct stat sb;
    if (stat(r->path, &sb) != 0 || sb.st_size == 0) {
        r->need_header = true;
        return ENG_OK;
    }
    char *data = NULL;
    size_t n = 0;
    int rc = eng_read_file(r->path, &data, &n, err, errlen);
    if (rc) return rc;
    if (n && data[n - 1] != '\n') {  /* a line torn by a crash: cut it off */
        size_t keep = n;
        while (keep > 0 && data[keep - 1] != '\n') keep--;
        fprintf(stderr, "kvreplay serve: %s: cut off a torn last line (%zu bytes, no newline: a crash while "
                "recording it)\n", r->path, n - keep);
        if (truncate(r->path, (off_t)keep) != 0) {
            eng_errf(err, errlen, "%s: cannot cut off the torn last line: %s", r->path, strerror(errno));
            free(data);
            return ENG_ERR_IO;
        }
        n = keep;
        if (n == 0) r->need_header = true;
    }
    hx_transcript t;
    rc = hx_transcript_parse(data, n, r->path, false, &t, NULL, err, errlen);
    free(data);
    if (rc) return rc;
    for (int32_t i = 0; i < t.n && !rc; i++) {
        int64_t s = session_index(r, t.reqs[i].session);
        if (s < 0) { rc = ENG_ERR_NOMEM; break; }
        hx_request_free(&r->last[s]);
        if (hx_request_copy(&r->last[s], &t.reqs[i])) rc = ENG_ERR_NOMEM;
    }
    hx_transcript_free(&t);
    return rc;
}

int hx_recorder_open(const char *path, const char *header_json, hx_recorder **out, char *err, size_t errlen) {
    *out = NULL;
    hx_recorder *r = calloc(1, sizeof *r);
    if (!r) return ENG_ERR_NOMEM;
    r->fd = -1;
    int rc = ENG_OK;
    if (path) {
        if (!(r->path = hx_strdup(path)) || !(r->header = hx_strdup(header_json))) rc = ENG_ERR_NOMEM;
        if (!rc) rc = load_existing(r, err, errlen);
        if (!rc && (r->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) < 0) {
            eng_errf(err, errlen, "%s: cannot open for appending: %s", path, strerror(errno));
            rc = ENG_ERR_IO;
        }
    }
    if (rc) {
        hx_recorder_close(r);
        return rc;
    }
    *out = r;
    return ENG_OK;
}

void hx_recorder_close(hx_recorder *r) {
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    for (int32_t i = 0; i < r->n_sessions; i++) hx_request_free(&r->last[i]);
    free(r->last);
    hx_strmap_free(&r->index);
    free(r->path);
    free(r->header);
    free(r);
}

int32_t hx_recorder_n_sessions(const hx_recorder *r) { return r ? r->n_sessions : 0; }

char *hx_serve_session_key(const hx_request *q) {
    return hx_request_kind_of(q) == HX_REQUEST_MESSAGES ? hx_request_session_key(q) : hx_strdup("\x1f" "raw");
}

const hx_request *hx_recorder_last(const hx_recorder *r, int32_t k) { return &r->last[k]; }

int hx_recorder_add(hx_recorder *r, const hx_request *q, char *err, size_t errlen) {
    if (!r->path) return ENG_OK;  /* no file: nothing to write or to continue */
    int64_t s = session_index(r, q->session);
    if (s < 0) return ENG_ERR_NOMEM;
    int rc = ENG_OK;
    eng_buf b = {0};
    char *line = NULL;
    size_t n = 0;
    if (r->need_header) {
        if ((rc = hx_request_serialize_line(NULL, NULL, r->header, &line, &n, err, errlen))) return rc;
        rc = eng_buf_append(&b, line, n) || eng_buf_append(&b, "\n", 1) ? ENG_ERR_NOMEM : ENG_OK;
        free(line);
    }
    const hx_request *prev = r->last[s].session ? &r->last[s] : NULL;
    if (!rc && !(rc = hx_request_serialize_line(q, prev, NULL, &line, &n, err, errlen))) {
        rc = eng_buf_append(&b, line, n) || eng_buf_append(&b, "\n", 1) ? ENG_ERR_NOMEM : ENG_OK;
        free(line);
    }
    if (!rc && (eng_write_all(r->fd, b.data, b.len) != 0 || fsync(r->fd) != 0)) {
        eng_errf(err, errlen, "%s: cannot append the request: %s", r->path, strerror(errno));
        rc = ENG_ERR_IO;
    }
    eng_buf_free(&b);
    if (rc) return rc;
    r->need_header = false;
    hx_request_free(&r->last[s]);
    return hx_request_copy(&r->last[s], q);
}
