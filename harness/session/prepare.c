/*
 * harness/session/prepare.c: normalize, render, tokenize (see prepare.h).
 * hx_prepare tokenizes the whole prompt (a transcript's request);
 * hx_prepare_upto stops where a token budget ends (a request from the
 * network), with the same ids for a prompt that fits.
 */
#include "prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "normalize.h"
#include "status.h"

struct hx_prepare_ctx {
    const eng_tokenizer *tok;
    hx_template          tmpl;
    hx_normalize         norm;
    char                 norm_names[128];
    const char          *source;  /* the transcript's path, for messages (borrowed), or NULL */
};

void hx_prepare_ctx_set_source(hx_prepare_ctx *c, const char *path) { c->source = path; }

int hx_vocab_load(const char *path, eng_tokenizer **tok, char **chat_template, char *err, size_t errlen) {
    *tok = NULL;
    if (chat_template) *chat_template = NULL;
    eng_gguf *g = NULL;
    int rc = eng_gguf_open(path, &g, err, errlen);
    if (rc) return rc;
    rc = eng_tokenizer_load(g, tok, err, errlen);
    if (rc == ENG_OK && chat_template) {
        const char *s = NULL;
        size_t n = 0;
        if (eng_gguf_get_str(g, "tokenizer.chat_template", &s, &n) == ENG_OK && s) {
            if (!(*chat_template = malloc(n + 1))) rc = ENG_ERR_NOMEM;
            else memcpy(*chat_template, s, n), (*chat_template)[n] = '\0';
        }
    }
    eng_gguf_close(g);
    if (rc) {
        eng_tokenizer_free(*tok);
        *tok = NULL;
    }
    return rc;
}

int hx_prepare_ctx_new(const eng_tokenizer *tok, const char *template_name, const char *chat_template_meta,
                       const char *normalize, hx_prepare_ctx **out, char *err, size_t errlen) {
    *out = NULL;
    hx_prepare_ctx *c = calloc(1, sizeof *c);
    if (!c) return ENG_ERR_NOMEM;
    c->tok = tok;
    if (template_name) {
        int t = hx_template_from_name(template_name);
        if (t < 0) {
            eng_errf(err, errlen, "--template: unknown template '%s' (known: chatml, llama2, llama3, raw)", template_name);
            free(c);
            return ENG_ERR_ARG;
        }
        c->tmpl = (hx_template)t;
    } else {
        c->tmpl = hx_template_guess(NULL, chat_template_meta && *chat_template_meta ? chat_template_meta : NULL);
    }
    if (hx_normalize_parse(normalize, &c->norm) != ENG_OK) {
        eng_errf(err, errlen, "%s", c->norm.err);
        free(c);
        return ENG_ERR_ARG;
    }
    hx_normalize_names(&c->norm, c->norm_names, sizeof c->norm_names);
    *out = c;
    return ENG_OK;
}

void hx_prepare_ctx_free(hx_prepare_ctx *c) { free(c); }
const char *hx_prepare_template_name(const hx_prepare_ctx *c) { return hx_template_name(c->tmpl); }
const char *hx_prepare_normalize_names(const hx_prepare_ctx *c) { return c->norm_names; }

/* Tokenizes text into malloc'd arrays (offsets may be NULL). */
static int tokenize(const eng_tokenizer *tok, const char *text, size_t len, bool bos, int32_t **ids,
                    int32_t **offsets, int32_t *n) {
    int32_t cap = (int32_t)(len / 2 + 16);
    for (int attempt = 0; attempt < 2; attempt++) {
        *ids = malloc(sizeof(int32_t) * (size_t)cap);
        if (offsets) *offsets = malloc(sizeof(int32_t) * (size_t)cap);
        if (!*ids || (offsets && !*offsets)) goto oom;
        int32_t k = eng_tokenize(tok, text, len, bos, false, true, *ids, cap, offsets ? *offsets : NULL);
        if (k >= 0) { *n = k; return ENG_OK; }
        free(*ids);
        if (offsets) free(*offsets);
        cap = -k;
    }
    return ENG_ERR_NOMEM;
oom:
    free(*ids);
    if (offsets) free(*offsets);
    *ids = NULL;
    return ENG_ERR_NOMEM;
}

/* The response as the cache holds it after generation: the tokens that follow
 * the prompt's tokens in tokenize(prompt + response), so they match how the
 * next request's prompt (which contains both) tokenizes. When the joint
 * tokenization does not start with the prompt's own tokens (a merge across
 * the seam), the response is tokenized on its own instead. */
static int response_tokens(hx_prepare_ctx *c, hx_prepared *out, const hx_render *resp) {
    if (out->prompt.text) {
        size_t n = out->text_len + resp->len;
        char *joint = malloc(n + 1);
        if (!joint) return ENG_ERR_NOMEM;
        memcpy(joint, out->text, out->text_len);
        memcpy(joint + out->text_len, resp->text, resp->len);
        joint[n] = '\0';
        int32_t *ids = NULL, m = 0;
        int rc = tokenize(c->tok, joint, n, eng_tokenizer_add_bos(c->tok), &ids, NULL, &m);
        free(joint);
        if (rc != ENG_OK) return rc;
        if (m > out->n && !memcmp(ids, out->tokens, sizeof(int32_t) * (size_t)out->n)) {
            out->n_resp = m - out->n;
            out->resp = malloc(sizeof(int32_t) * (size_t)out->n_resp);
            if (!out->resp) { free(ids); return ENG_ERR_NOMEM; }
            memcpy(out->resp, ids + out->n, sizeof(int32_t) * (size_t)out->n_resp);
            free(ids);
            return ENG_OK;
        }
        free(ids);
    }
    return tokenize(c->tok, resp->text, resp->len, false, &out->resp, NULL, &out->n_resp);
}

/* The first token starting at or after the end of the system turn (-1: no system turn). */
static int32_t stable_end_of(const hx_prepared *p) {
    size_t sys_end = hx_render_system_end(&p->prompt);
    if (sys_end == 0) return -1;
    int32_t i = 0;
    while (i < p->n && (size_t)p->offsets[i] < sys_end) i++;
    return i;
}

/* A pre-tokenized request's ids checked against the vocabulary and copied. */
static int copy_tokens(hx_prepare_ctx *c, const hx_request *r, hx_prepared *out, char *err, size_t errlen) {
    out->tokens = malloc(sizeof(int32_t) * (size_t)(r->n_tokens > 0 ? r->n_tokens : 1));
    out->offsets = calloc((size_t)(r->n_tokens > 0 ? r->n_tokens : 1), sizeof(int32_t));
    if (!out->tokens || !out->offsets) return ENG_ERR_NOMEM;
    int32_t V = eng_tokenizer_n_vocab(c->tok);
    for (int32_t i = 0; i < r->n_tokens; i++) {
        if (r->tokens[i] < 0 || r->tokens[i] >= V) {
            eng_errf(err, errlen, "%s:%lld: tokens[%d]: id %d is outside the vocabulary [0, %d)",
                     c->source ? c->source : "transcript", (long long)r->line, i, r->tokens[i], V);
            return ENG_ERR_ARG;
        }
    }
    memcpy(out->tokens, r->tokens, sizeof(int32_t) * (size_t)r->n_tokens);
    out->n = r->n_tokens;
    return ENG_OK;
}

static int empty_prompt(const hx_prepare_ctx *c, const hx_request *r, char *err, size_t errlen) {
    eng_errf(err, errlen, "%s:%lld: the prompt is empty (no tokens)", c->source ? c->source : "transcript",
             (long long)r->line);
    return ENG_ERR_ARG;
}

int hx_prepare(hx_prepare_ctx *c, hx_request *r, hx_prepared *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->req = r;
    out->stable_end = -1;
    out->text = "";
    int k = hx_normalize_apply(&c->norm, r);
    if (k < 0) return ENG_ERR_NOMEM;
    out->n_normalized = k;
    int rc;
    if (r->tokens) {  /* pre-tokenized: used as is */
        if ((rc = copy_tokens(c, r, out, err, errlen)) != ENG_OK) goto fail;
    } else {
        if ((rc = hx_render_prompt(c->tmpl, r, &out->prompt, err, errlen)) != ENG_OK) goto fail;
        out->text = out->prompt.text;
        out->text_len = out->prompt.len;
        rc = tokenize(c->tok, out->text, out->text_len, eng_tokenizer_add_bos(c->tok), &out->tokens, &out->offsets,
                      &out->n);
        if (rc != ENG_OK) goto fail;
        out->stable_end = stable_end_of(out);
    }
    if (out->n < 1) {
        rc = empty_prompt(c, r, err, errlen);
        goto fail;
    }
    if ((rc = hx_prepare_response(c, r, out, err, errlen)) != ENG_OK) goto fail;
    return ENG_OK;
fail:
    hx_prepared_free(out);
    return rc;
}

int hx_prepare_render(hx_prepare_ctx *c, hx_request *r, hx_render *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (hx_normalize_apply(&c->norm, r) < 0) return ENG_ERR_NOMEM;
    return hx_render_prompt(c->tmpl, r, out, err, errlen);
}

int64_t hx_tokens_over(const eng_tokenizer *tok, const char *text, size_t len, bool bos, bool parse_special,
                       int32_t max_tokens, bool *counted) {
    *counted = false;
    if (len <= (size_t)HX_PREPARE_EXACT_BYTES * (size_t)(max_tokens > 0 ? max_tokens : 0) + 4096) {
        int32_t n = eng_tokenize(tok, text, len, bos, false, parse_special, NULL, 0, NULL);  /* counted, not kept */
        if (n != INT32_MIN) {
            *counted = true;
            return n < 0 ? -(int64_t)n : n;
        }
    }
    const int64_t L = eng_tokenizer_max_token_bytes(tok);
    const int64_t lb = eng_tokenizer_bytes_bound(tok) && L > 0 ? ((int64_t)len + L - 1) / L + (bos ? 1 : 0) : 0;
    return lb > (int64_t)max_tokens ? lb : (int64_t)max_tokens + 1;
}

/* ids and offsets of out->text, as far as b->max_tokens allows: ENG_OK with the whole
 * tokenization, or ENG_ERR_RANGE with b->at_least set (nothing kept). */
static int tokenize_upto(hx_prepare_ctx *c, hx_prepared *out, hx_prepare_budget *b) {
    const eng_tokenizer *tok = c->tok;
    const bool bos = eng_tokenizer_add_bos(tok) && eng_tokenizer_bos(tok) >= 0;
    const int64_t max = b->max_tokens > 0 ? b->max_tokens : 0;
    const int64_t L = eng_tokenizer_max_token_bytes(tok);
    /* the size alone: a text of B bytes has at least ceil(B / L) tokens where the bound holds */
    const int64_t lb = eng_tokenizer_bytes_bound(tok) && L > 0
                       ? ((int64_t)out->text_len + L - 1) / L + (bos ? 1 : 0) : (bos ? 1 : 0);
    if (lb > max) {
        b->at_least = hx_tokens_over(tok, out->text, out->text_len, bos, true, b->max_tokens, &b->counted);
        return ENG_ERR_RANGE;
    }
    /* arrays the size of the budget, or of a short text's most tokens (a byte each, and an SPM dummy
     * prefix per fragment: an estimate, checked: a text that has more is tokenized again to the budget) */
    const int64_t most = 2 * (int64_t)out->text_len + 2;
    int32_t cap = (int32_t)(max < most ? max : most), n;
    bool more = false;
    for (;;) {
        out->tokens = malloc(sizeof(int32_t) * (size_t)(cap > 0 ? cap : 1));
        out->offsets = malloc(sizeof(int32_t) * (size_t)(cap > 0 ? cap : 1));
        if (!out->tokens || !out->offsets) return ENG_ERR_NOMEM;
        n = eng_tokenize_upto(tok, out->text, out->text_len, bos, false, true, cap, out->tokens, out->offsets, &more);
        if (n == INT32_MIN) return ENG_ERR_NOMEM;
        if (!more || cap >= max) break;
        free(out->tokens);
        free(out->offsets);
        out->tokens = out->offsets = NULL;
        cap = (int32_t)max;
    }
    if (more) {
        b->at_least = hx_tokens_over(tok, out->text, out->text_len, bos, true, b->max_tokens, &b->counted);
        return ENG_ERR_RANGE;
    }
    out->n = n;
    b->at_least = n;
    b->counted = true;
    return ENG_OK;
}

int hx_prepare_upto(hx_prepare_ctx *c, hx_request *r, hx_prepare_budget *b, hx_prepared *out, char *err,
                    size_t errlen) {
    memset(out, 0, sizeof *out);
    out->req = r;
    out->stable_end = -1;
    out->text = "";
    b->at_least = 0;
    b->counted = false;
    if (b->received) memset(b->received, 0, sizeof *b->received);
    /* the request as it came: copied now only when a rule will rewrite it, else once it fits */
    bool copied = false;
    if (b->received && hx_normalize_spans(&c->norm, r, NULL, 0) > 0) {
        if (hx_request_copy(b->received, r)) return ENG_ERR_NOMEM;
        copied = true;
    }
    int rc;
    int k = hx_normalize_apply(&c->norm, r);
    if (k < 0) { rc = ENG_ERR_NOMEM; goto fail; }
    out->n_normalized = k;
    if (r->tokens) {
        if (r->n_tokens > b->max_tokens) {
            b->at_least = r->n_tokens;
            b->counted = true;
            rc = ENG_ERR_RANGE;
            goto fail;
        }
        if ((rc = copy_tokens(c, r, out, err, errlen)) != ENG_OK) goto fail;
        b->at_least = out->n;
        b->counted = true;
    } else {
        if ((rc = hx_render_prompt(c->tmpl, r, &out->prompt, err, errlen)) != ENG_OK) goto fail;
        out->text = out->prompt.text;
        out->text_len = out->prompt.len;
        if ((rc = tokenize_upto(c, out, b)) != ENG_OK) goto fail;
        out->stable_end = stable_end_of(out);
    }
    if (out->n < 1) {
        rc = empty_prompt(c, r, err, errlen);
        goto fail;
    }
    if (b->received && !copied && hx_request_copy(b->received, r)) { rc = ENG_ERR_NOMEM; goto fail; }
    copied = b->received != NULL;
    if ((rc = hx_prepare_response(c, r, out, err, errlen)) != ENG_OK) goto fail;
    return ENG_OK;
fail:
    if (rc == ENG_ERR_RANGE)
        eng_errf(err, errlen, "%s:%lld: the prompt has %s%lld tokens, over the budget of %d",
                 c->source ? c->source : "request", (long long)r->line, b->counted ? "" : "at least ",
                 (long long)b->at_least, b->max_tokens);
    hx_prepared_free(out);
    if (copied) {
        hx_request_free(b->received);
        memset(b->received, 0, sizeof *b->received);
    }
    return rc;
}

int hx_prepare_response(hx_prepare_ctx *c, const hx_request *r, hx_prepared *p, char *err, size_t errlen) {
    free(p->resp);
    p->resp = NULL;
    p->n_resp = 0;
    hx_render resp = {0};
    int rc = hx_render_response(c->tmpl, r, &resp, err, errlen);
    if (rc == ENG_OK && resp.len > 0) rc = response_tokens(c, p, &resp);
    hx_render_free(&resp);
    return rc;
}

void hx_prepared_free(hx_prepared *p) {
    if (!p) return;
    hx_render_free(&p->prompt);
    free(p->tokens);
    free(p->offsets);
    free(p->resp);
    memset(p, 0, sizeof *p);
}

void hx_prepared_where(const hx_prepared *p, int64_t byte, char *buf, size_t cap) {
    if (byte < 0 || !p->prompt.text) { snprintf(buf, cap, "pre-tokenized prompt"); return; }
    hx_span_describe(hx_render_find(&p->prompt, (size_t)byte), p->req, buf, cap);
}
