/*
 * harness/api/sse.c: server-sent events: writing and incremental parsing (see sse.h).
 */
#include "sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

int hx_sse_write(eng_buf *b, const char *name, const char *data, size_t n) {
    if (name && eng_buf_printf(b, "event: %s\n", name)) return ENG_ERR_NOMEM;
    for (size_t i = 0;;) {  /* one "data:" line per line of the payload (an empty payload: one empty line) */
        size_t j = i;
        while (j < n && data[j] != '\n' && data[j] != '\r') j++;
        if (eng_buf_append(b, "data: ", 6) || eng_buf_append(b, data + i, j - i) || eng_buf_append(b, "\n", 1))
            return ENG_ERR_NOMEM;
        if (j >= n) break;
        if (data[j] == '\r' && j + 1 < n && data[j + 1] == '\n') j++;
        i = j + 1;  /* a payload ending in a newline gets a last, empty, data line */
    }
    return eng_buf_append(b, "\n", 1) ? ENG_ERR_NOMEM : ENG_OK;
}

int hx_sse_write_json(eng_buf *b, const char *name, json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    int rc = t ? hx_sse_write(b, name, t, strlen(t)) : ENG_ERR_NOMEM;
    free(t);
    return rc;
}

void hx_sse_parser_init(hx_sse_parser *p) {
    memset(p, 0, sizeof *p);
    p->max_line = (size_t)64 << 20;
}

void hx_sse_parser_free(hx_sse_parser *p) {
    eng_buf_free(&p->line);
    eng_buf_free(&p->data);
    memset(p, 0, sizeof *p);
}

static void reset_event(hx_sse_parser *p) {
    p->data.len = 0;
    if (p->data.data) p->data.data[0] = '\0';
    p->name[0] = '\0';
    p->has_data = false;
}

/* One complete line (without its terminator): a field, a comment, or the
 * blank line that dispatches. */
static int take_line(hx_sse_parser *p, const char *s, size_t n, hx_sse_fn fn, void *ud) {
    if (n == 0) {
        int rc = 0;
        if (p->has_data) {
            if (eng_buf_append(&p->data, "", 0)) return p->err = ENG_ERR_NOMEM;
            hx_sse_event ev = {p->name, p->data.data ? p->data.data : "", p->data.len, p->id};
            p->n_events++;
            rc = fn ? fn(ud, &ev) : 0;
        }
        reset_event(p);
        return rc;
    }
    if (s[0] == ':') return 0;  /* a comment */
    const char *colon = memchr(s, ':', n);
    size_t fl = colon ? (size_t)(colon - s) : n;
    const char *v = colon ? colon + 1 : s + n;
    size_t vl = colon ? n - fl - 1 : 0;
    if (vl > 0 && v[0] == ' ') v++, vl--;
    if (fl == 4 && !memcmp(s, "data", 4)) {
        if ((p->has_data && eng_buf_append(&p->data, "\n", 1)) || eng_buf_append(&p->data, v, vl))
            return p->err = ENG_ERR_NOMEM;
        p->has_data = true;
    } else if (fl == 5 && !memcmp(s, "event", 5)) {
        size_t k = vl < sizeof p->name - 1 ? vl : sizeof p->name - 1;
        memcpy(p->name, v, k);
        p->name[k] = '\0';
    } else if (fl == 2 && !memcmp(s, "id", 2)) {
        if (!memchr(v, '\0', vl)) {
            size_t k = vl < sizeof p->id - 1 ? vl : sizeof p->id - 1;
            memcpy(p->id, v, k);
            p->id[k] = '\0';
        }
    }  /* "retry" and unknown fields are ignored */
    return 0;
}

int hx_sse_feed(hx_sse_parser *p, const char *bytes, size_t n, hx_sse_fn fn, void *ud) {
    if (p->err) return p->err;
    size_t i = 0;
    while (i < n) {
        if (p->after_cr) {  /* CRLF: the LF belongs to the CR that ended the line */
            p->after_cr = false;
            if (bytes[i] == '\n') { i++; continue; }
        }
        size_t j = i;
        while (j < n && bytes[j] != '\n' && bytes[j] != '\r') j++;
        if (j - i > 0) {
            if (p->line.len + (j - i) > p->max_line) return p->err = ENG_ERR_RANGE;
            if (eng_buf_append(&p->line, bytes + i, j - i)) return p->err = ENG_ERR_NOMEM;
        }
        if (j == n) break;  /* the line continues in the next feed */
        if (bytes[j] == '\r') p->after_cr = true;
        int rc = take_line(p, p->line.data ? p->line.data : "", p->line.len, fn, ud);
        p->line.len = 0;
        if (rc) return rc;
        i = j + 1;
    }
    return 0;
}

bool hx_sse_at_boundary(const hx_sse_parser *p) { return p->line.len == 0 && !p->has_data; }
