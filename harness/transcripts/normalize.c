/*
 * harness/transcripts/normalize.c: prompt normalization rules (see normalize.h).
 *
 * anthropic-cch works on the header line only: it finds each "cch=" that
 * starts a field (at the line start or after ' ', ';' or ':'), and replaces
 * the bytes up to the next ';' or '\n' (or the end) with "fffff". The text is
 * rebuilt in a new buffer, so a value of any length is handled.
 */
#include "normalize.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "str.h"
#include "util.h"

static const char k_header[] = "x-anthropic-billing-header:";

static const struct {
    const char *name;
    uint32_t bit;
} k_rules[] = {
    {"anthropic-cch", HX_NORMALIZE_ANTHROPIC_CCH},
};
#define N_RULES (sizeof k_rules / sizeof k_rules[0])

int hx_normalize_parse(const char *names, hx_normalize *out) {
    memset(out, 0, sizeof *out);
    if (!names) return ENG_OK;
    const char *p = names;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        const char *q = p;
        while (*q && *q != ',') q++;
        size_t n = (size_t)(q - p);
        while (n > 0 && p[n - 1] == ' ') n--;
        bool found = false;
        if (n == 4 && !strncmp(p, "none", 4)) found = true;
        for (size_t i = 0; i < N_RULES && !found; i++) {
            if (strlen(k_rules[i].name) == n && !strncmp(p, k_rules[i].name, n)) {
                out->rules |= k_rules[i].bit;
                found = true;
            }
        }
        if (!found) {
            out->rules = 0;
            snprintf(out->err, sizeof out->err, "--normalize: unknown rule '%.*s' (known: anthropic-cch)",
                     (int)(n > 64 ? 64 : n), p);
            return ENG_ERR_NOT_FOUND;
        }
        p = q;
    }
    return ENG_OK;
}

const char *hx_normalize_names(const hx_normalize *n, char *buf, size_t len) {
    if (!buf || len == 0) return buf;
    buf[0] = '\0';
    size_t off = 0;
    for (size_t i = 0; n && i < N_RULES; i++) {
        if (!(n->rules & k_rules[i].bit)) continue;
        int k = snprintf(buf + off, len - off, "%s%s", off ? "," : "", k_rules[i].name);
        if (k < 0 || (size_t)k >= len - off) break;
        off += (size_t)k;
    }
    return buf;
}

/* The next "cch=" that starts a field of the header line [line, line_end)
 * at or after p (at the line start or after ' ', ';' or ':'), or NULL. */
static const char *next_cch(const char *p, const char *line, const char *line_end) {
    for (const char *s = p; s + 4 <= line_end; s++)
        if (memcmp(s, "cch=", 4) == 0 && (s == line || s[-1] == ' ' || s[-1] == ';' || s[-1] == ':')) return s;
    return NULL;
}

/* The end of the value that starts at v: the next ';', or the line end. */
static const char *value_end(const char *v, const char *line_end) {
    while (v < line_end && *v != ';') v++;
    return v;
}

/* Rewrites the cch fields of the header line [line, line_end) into b.
 * Returns the number of values changed. */
static int rewrite_line(eng_buf *b, const char *line, const char *line_end, int *rc) {
    int changed = 0;
    const char *p = line, *hit;
    while (p < line_end && (hit = next_cch(p, line, line_end)) != NULL) {
        const char *v = hit + 4, *ve = value_end(v, line_end);
        size_t vlen = (size_t)(ve - v), clen = sizeof HX_NORMALIZE_CCH_VALUE - 1;
        if (eng_buf_append(b, p, (size_t)(v - p)) || eng_buf_append(b, HX_NORMALIZE_CCH_VALUE, clen)) {
            *rc = ENG_ERR_NOMEM;
            return 0;
        }
        if (vlen != clen || memcmp(v, HX_NORMALIZE_CCH_VALUE, clen) != 0) changed++;
        p = ve;
    }
    if (eng_buf_append(b, p, (size_t)(line_end - p))) *rc = ENG_ERR_NOMEM;
    return changed;
}

/* Appends the cch values of the header lines of text to out (at most cap). */
static int cch_values(const char *text, int every_line, hx_part part, int32_t index, int32_t block,
                      hx_norm_span *out, int n, int cap) {
    size_t hl = sizeof k_header - 1;
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        if (strncmp(p, k_header, hl) == 0) {
            const char *q = p, *hit;
            while ((hit = next_cch(q, p, end)) != NULL) {
                const char *v = hit + 4, *ve = value_end(v, end);
                if (n < cap) out[n] = (hx_norm_span){part, index, block, (size_t)(v - text), (size_t)(ve - v)};
                n++;
                q = ve;
            }
        }
        if (!every_line) break;
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

int hx_normalize_spans(const hx_normalize *nz, const hx_request *r, hx_norm_span *out, int cap) {
    int n = 0;
    if (!nz || !(nz->rules & HX_NORMALIZE_ANTHROPIC_CCH) || !r) return 0;
    for (int32_t i = 0; i < r->n_system; i++) n = cch_values(r->system[i].text, 0, HX_PART_SYSTEM, i, -1, out, n, cap);
    if (r->n_messages > 0 && r->messages[0].role == HX_ROLE_USER) {
        const hx_message *m = &r->messages[0];
        for (int32_t b = 0; b < m->n_blocks; b++) {
            if (m->blocks[b].type != HX_BLOCK_TEXT) continue;
            n = cch_values(m->blocks[b].text, 0, HX_PART_MESSAGE, 0, b, out, n, cap);
            break;
        }
    }
    if (r->prompt) n = cch_values(r->prompt, 1, HX_PART_PROMPT, -1, -1, out, n, cap);
    return n;
}

int hx_normalize_cch_text(char **text, int every_line) {
    const char *t = *text;
    if (!t) return 0;
    size_t hl = sizeof k_header - 1;
    if (!every_line && strncmp(t, k_header, hl) != 0) return 0;
    if (every_line && !strstr(t, k_header)) return 0;
    eng_buf b = {0};
    int rc = ENG_OK, changed = 0;
    const char *p = t;
    while (*p) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        if (strncmp(p, k_header, hl) == 0) changed += rewrite_line(&b, p, end, &rc);
        else if (eng_buf_append(&b, p, (size_t)(end - p))) rc = ENG_ERR_NOMEM;
        if (nl && !rc && eng_buf_append(&b, "\n", 1)) rc = ENG_ERR_NOMEM;
        if (rc) break;
        p = nl ? nl + 1 : end;
        if (!every_line) { /* only the first line: copy the rest verbatim */
            if (eng_buf_append(&b, p, strlen(p))) rc = ENG_ERR_NOMEM;
            break;
        }
    }
    if (rc) {
        eng_buf_free(&b);
        return rc;
    }
    if (changed == 0) {
        eng_buf_free(&b);
        return 0;
    }
    free(*text);
    *text = b.data;
    return changed;
}

int hx_normalize_apply(const hx_normalize *n, hx_request *r) {
    if (!n || !(n->rules & HX_NORMALIZE_ANTHROPIC_CCH) || !r) return 0;
    int total = 0, k;
    for (int32_t i = 0; i < r->n_system; i++) {
        if ((k = hx_normalize_cch_text(&r->system[i].text, 0)) < 0) return k;
        total += k;
    }
    if (r->n_messages > 0 && r->messages[0].role == HX_ROLE_USER) {
        hx_message *m = &r->messages[0];
        for (int32_t b = 0; b < m->n_blocks; b++) {
            if (m->blocks[b].type != HX_BLOCK_TEXT) continue;
            if ((k = hx_normalize_cch_text(&m->blocks[b].text, 0)) < 0) return k;
            total += k;
            break;
        }
    }
    if (r->prompt) {
        if ((k = hx_normalize_cch_text(&r->prompt, 1)) < 0) return k;
        total += k;
    }
    return total;
}

// ----------------------------------------------------------------------------
// Session keys

static void key_block(eng_buf *k, const hx_block *b, int *rc) {
    char *t = hx_strdup(b->text);
    if (!t) { *rc = ENG_ERR_NOMEM; return; }
    if (hx_normalize_cch_text(&t, 0) < 0) *rc = ENG_ERR_NOMEM;
    if (eng_buf_printf(k, "%d\x1f%s\x1f%s\x1f%s\x1f%s\x1f%d\x1e", (int)b->type, t, b->id ? b->id : "",
                       b->name ? b->name : "", b->input ? b->input : "", (int)b->is_error))
        *rc = ENG_ERR_NOMEM;
    free(t);
}

char *hx_request_session_key(const hx_request *q) {
    eng_buf k = {0};
    int rc = ENG_OK;
    for (int32_t i = 0; i < q->n_system; i++) key_block(&k, &q->system[i], &rc);
    if (eng_buf_append(&k, "\x1d", 1)) rc = ENG_ERR_NOMEM;
    for (int32_t m = 0; m < q->n_messages; m++) {
        if (q->messages[m].role == HX_ROLE_SYSTEM) continue;
        if (eng_buf_printf(&k, "%d\x1d", (int)q->messages[m].role)) rc = ENG_ERR_NOMEM;
        for (int32_t b = 0; b < q->messages[m].n_blocks; b++) key_block(&k, &q->messages[m].blocks[b], &rc);
        break;
    }
    if (rc) {
        eng_buf_free(&k);
        return NULL;
    }
    return k.data;
}
