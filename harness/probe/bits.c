/*
 * harness/probe/bits.c: a server's log-probabilities compared bit for bit,
 * and the byte span of a JSON value inside the text the server sent (see
 * bits.h).
 */
#include "bits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// JSON spans: a minimal skipper over RFC 8259 text (whitespace, strings with
// escapes, numbers, literals, nested objects and arrays), depth-limited.

typedef struct scan {
    const char *s;
    size_t      n, i;
} scan;

static void ws(scan *x) {
    while (x->i < x->n && (x->s[x->i] == ' ' || x->s[x->i] == '\t' || x->s[x->i] == '\n' || x->s[x->i] == '\r')) x->i++;
}

static bool skip_string(scan *x) {
    if (x->i >= x->n || x->s[x->i] != '"') return false;
    for (x->i++; x->i < x->n; x->i++) {
        if (x->s[x->i] == '\\') x->i++;
        else if (x->s[x->i] == '"') {
            x->i++;
            return true;
        }
    }
    return false;
}

static bool skip_value(scan *x, int depth) {
    ws(x);
    if (x->i >= x->n || depth > 256) return false;
    char c = x->s[x->i];
    if (c == '"') return skip_string(x);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        x->i++;
        ws(x);
        if (x->i < x->n && x->s[x->i] == close) {
            x->i++;
            return true;
        }
        for (;;) {
            if (c == '{') {
                ws(x);
                if (!skip_string(x)) return false;
                ws(x);
                if (x->i >= x->n || x->s[x->i] != ':') return false;
                x->i++;
            }
            if (!skip_value(x, depth + 1)) return false;
            ws(x);
            if (x->i >= x->n) return false;
            if (x->s[x->i] == ',') { x->i++; continue; }
            if (x->s[x->i] == close) { x->i++; return true; }
            return false;
        }
    }
    size_t start = x->i;  /* a number or a literal: up to a delimiter */
    while (x->i < x->n && !strchr(",}] \t\r\n", x->s[x->i])) x->i++;
    return x->i > start;
}

/* Moves x onto the value of key (object) or index (array) at x->i. */
static bool descend(scan *x, const char *step, size_t k) {
    ws(x);
    if (x->i >= x->n) return false;
    char c = x->s[x->i];
    if (c == '[') {
        char *end = NULL;
        long want = strtol(step, &end, 10);
        if (end != step + k || want < 0) return false;
        x->i++;
        for (long idx = 0;; idx++) {
            ws(x);
            if (x->i < x->n && x->s[x->i] == ']') return false;
            if (idx == want) return true;
            if (!skip_value(x, 1)) return false;
            ws(x);
            if (x->i >= x->n || x->s[x->i] != ',') return false;
            x->i++;
        }
    }
    if (c != '{') return false;
    x->i++;
    for (;;) {
        ws(x);
        if (x->i >= x->n || x->s[x->i] == '}') return false;
        size_t ks = x->i + 1;
        if (!skip_string(x)) return false;
        bool match = x->i - 1 - ks == k && !memcmp(x->s + ks, step, k);
        ws(x);
        if (x->i >= x->n || x->s[x->i] != ':') return false;
        x->i++;
        if (match) return true;
        if (!skip_value(x, 1)) return false;
        ws(x);
        if (x->i >= x->n || x->s[x->i] != ',') return false;
        x->i++;
    }
}

bool hx_json_span(const char *s, size_t n, const char *path, size_t *off, size_t *len) {
    scan x = {s, n, 0};
    for (const char *p = path; *p;) {
        size_t k = strcspn(p, ".");
        if (!descend(&x, p, k)) return false;
        p += k;
        if (*p == '.') p++;
    }
    ws(&x);
    size_t start = x.i;
    if (!skip_value(&x, 0)) return false;
    *off = start;
    *len = x.i - start;
    return true;
}

// ----------------------------------------------------------------------------
// Log-probabilities, bit for bit

bool hx_token_same(int32_t ida, const char *ta, size_t na, int32_t idb, const char *tb, size_t nb) {
    if (ida >= 0 && idb >= 0) return ida == idb;
    return na == nb && (na == 0 || !memcmp(ta, tb, na));
}

static bool prob_same(const hx_api_prob *a, const hx_api_prob *b) {
    return hx_token_same(a->id, a->text, a->len, b->id, b->text, b->len);
}

static void at_rank(hx_cmp *c, int32_t k, float a, float b) {
    c->first_diff = k;
    c->a_first = a;
    c->b_first = b;
    c->ulp_first = hx_ulp_distance(a, b);
}

void hx_probs_compare(const hx_api_token *a, const hx_api_token *b, int32_t n_vocab, hx_cmp *c) {
    memset(c, 0, sizeof *c);
    c->first_diff = -1;
    c->kl = NAN;
    c->top1_a = a->id;
    c->top1_b = b->id;
    bool same_chosen = hx_token_same(a->id, a->text, a->len, b->id, b->text, b->len);
    if (a->n_top == 0 || b->n_top == 0) {  /* no candidates: the chosen tokens and their log-probabilities */
        c->top1_equal = same_chosen;
        bool bits = (isnan(a->logprob) && isnan(b->logprob)) || !memcmp(&a->logprob, &b->logprob, sizeof(float));
        c->equal = same_chosen && bits && a->n_top == b->n_top;
        if (!c->equal) at_rank(c, 0, a->logprob, b->logprob);
        if (same_chosen && !isnan(a->logprob) && !isnan(b->logprob)) {
            c->max_abs = fabs((double)a->logprob - (double)b->logprob);
            c->max_ulp = hx_ulp_distance(a->logprob, b->logprob);
        }
        return;
    }
    c->top1_a = a->top[0].id;
    c->top1_b = b->top[0].id;
    c->top1_equal = prob_same(&a->top[0], &b->top[0]);
    int32_t n = a->n_top < b->n_top ? a->n_top : b->n_top;
    for (int32_t k = 0; k < n && c->first_diff < 0; k++)
        if (!prob_same(&a->top[k], &b->top[k]) || memcmp(&a->top[k].logprob, &b->top[k].logprob, sizeof(float)))
            at_rank(c, k, a->top[k].logprob, b->top[k].logprob);
    if (c->first_diff < 0 && a->n_top != b->n_top) at_rank(c, n, n < a->n_top ? a->top[n].logprob : NAN,
                                                            n < b->n_top ? b->top[n].logprob : NAN);
    bool chosen_bits = !memcmp(&a->logprob, &b->logprob, sizeof(float)) || (isnan(a->logprob) && isnan(b->logprob));
    c->equal = c->first_diff < 0 && same_chosen && chosen_bits;
    if (c->first_diff < 0 && !c->equal) at_rank(c, 0, a->logprob, b->logprob);
    /* figures over the candidates both hold, matched by id through an index of b (by bytes, and only
     * when the lists are short, where a candidate has no id) */
    bool full = n_vocab > 0 && a->n_top == n_vocab && b->n_top == n_vocab;
    int32_t max_id = -1;
    bool ids = true;
    for (int32_t j = 0; j < b->n_top; j++) {
        if (b->top[j].id < 0) ids = false;
        else if (b->top[j].id > max_id) max_id = b->top[j].id;
    }
    for (int32_t i = 0; i < a->n_top; i++) ids = ids && a->top[i].id >= 0;
    int32_t *pos = ids && max_id >= 0 && max_id < (1 << 26) ? malloc(sizeof(int32_t) * (size_t)(max_id + 1)) : NULL;
    if (pos) {
        for (int32_t j = 0; j <= max_id; j++) pos[j] = -1;
        for (int32_t j = 0; j < b->n_top; j++) pos[b->top[j].id] = j;
    }
    double kl = 0;
    for (int32_t i = 0; i < a->n_top; i++) {
        const hx_api_prob *pa = &a->top[i], *pb = NULL;
        if (i < b->n_top && prob_same(pa, &b->top[i])) pb = &b->top[i];
        else if (pos) pb = pa->id <= max_id && pos[pa->id] >= 0 ? &b->top[pos[pa->id]] : NULL;
        else
            for (int32_t j = 0; !pb && j < b->n_top && b->n_top <= 4096; j++)
                if (prob_same(pa, &b->top[j])) pb = &b->top[j];
        if (!pb) {
            full = false;
            continue;
        }
        double d = fabs((double)pa->logprob - (double)pb->logprob);
        uint64_t u = hx_ulp_distance(pa->logprob, pb->logprob);
        if (d > c->max_abs) c->max_abs = d;
        if (u > c->max_ulp) c->max_ulp = u;
        kl += exp((double)pa->logprob) * ((double)pa->logprob - (double)pb->logprob);
    }
    free(pos);
    if (full) c->kl = kl > 0 ? kl : 0;
}
