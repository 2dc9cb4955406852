/*
 * harness/probe/request.c: one request of `kvreplay probe`, a function per
 * step of probe.h: 1. the prompt and its ids, 2. the warm run, 3. the cold
 * runs (and with --repeat the warm run again), 4. reuse against expected,
 * 5. bits, 6. the row. probe_request runs them in the order the server's
 * cache asks: the expected reuse is counted on what the cache held before
 * the warm run, so step 4 comes right after step 2, before the cold runs
 * change what it holds.
 *
 * Invariants:
 * - nothing sent is rewritten: --normalize only changes what is expected;
 * - equality is memcmp of float bits and of the JSON text, never a tolerance;
 * - every request gets exactly one row, in one transaction, also when the
 *   server failed it (error, error_message, http_status; verified 0);
 * - the expected reuse is counted only on token ids the server is known to
 *   have seen (sent, or read back and checked against the count the server
 *   reported); otherwise the row says so (reuse_basis NULL) and the request
 *   is not judged on reuse.
 */
#include "probe_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bits.h"
#include "compare.h"
#include "policy.h"
#include "stats.h"
#include "status.h"
#include "transcript.h"

// ----------------------------------------------------------------------------
// What the steps share

/* A prompt's token ids, and what they are known to be. */
typedef struct req_ids {
    int32_t    *ids;       /* the prompt as the server tokenized it (or kvreplay, see basis) */
    int32_t     n;
    const char *basis;     /* "sent ids", "server tokenization", "kvreplay rendering", or NULL */
} req_ids;

/* A cold run against a warm one. */
typedef struct cmp_out {
    hx_cmp   first;           /* position 0 */
    int      json_equal;      /* -1: no JSON text */
    int32_t  fork;            /* -1: none */
    bool     decode_equal;
    int32_t  n_steps;
    hx_step_row *steps;       /* (n_steps) one row per position both runs generated */
} cmp_out;

/* One request under way: what each step leaves for the next. */
typedef struct probe_req {
    int32_t        idx;
    hx_request    *req;
    probe_outcome *out;             /* what the run counts */
    bool           done;            /* its row is written (the server failed it): no further step */
    /* 1. the prompt */
    bool           normalizing;     /* --normalize names rules */
    hx_prepared    loc, loc_norm;   /* kvreplay's rendering (-m), and the same after the rules */
    bool           have_loc, have_norm;
    hx_request     norm_req;        /* req after the rules */
    int64_t        n_prompt_local;  /* loc's length, -1: no local rendering */
    req_ids        sent;            /* the ids sent (the token route) */
    /* 2, 3. the runs */
    hx_api_req     q;               /* the generation request as sent */
    probe_gen      warm[PROBE_MAX_RUNS], cold[PROBE_MAX_RUNS];
    int            n_warm, n_cold;
    eng_buf        rep;             /* the repeated warm runs' reported reuse, comma-separated */
    int64_t        cold_reused;     /* the first cold run's reported reuse (> 0: not cold) */
    /* 4. reuse */
    int64_t        n_server;        /* the prompt tokens the warm run reported */
    req_ids        srv, srv_norm;   /* the ids the server saw (and the same after the rules) */
    const req_ids *basis;           /* the one of them the expected reuse is counted on */
    bool           exact;           /* the expected reuse is known exactly: the request is judged on reuse */
    int64_t        expected, reported;
    int32_t        lcp;
    char           why[600];        /* why reuse is not checked ("": it is) */
    char           diff[256];       /* where kvreplay's ids and the server's differ ("": they do not) */
    /* 5. bits */
    cmp_out        cmp;
    probe_gen      loaded;          /* --concurrency: the cold run again, under load (the first send) */
    bool           have_loaded;
    int32_t        n_overlap;       /* fillers still generating when a send was done, summed */
    char           load[320];       /* extra's "load" member ("": not under load) */
    int            cold_agree;      /* the cold runs gave the same bits */
    bool           identical;
    /* 6. the row */
    hx_request_row row;
    char           note[800], extra[1024];
} probe_req;

// ----------------------------------------------------------------------------
// The ids of a prompt

/* out: a copy of ids (n), named by basis. */
static int copy_ids(req_ids *out, const int32_t *ids, int32_t n, const char *basis) {
    if (!(out->ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)))) return ENG_ERR_NOMEM;
    if (n) memcpy(out->ids, ids, sizeof(int32_t) * (size_t)n);
    out->n = n;
    out->basis = basis;
    return ENG_OK;
}

/* The ids the server renders a request to without -m: its /apply-template and /tokenize for messages,
 * /tokenize for a raw prompt, the ids themselves for a tokenized one. */
static int server_ids_of(probe_ctx *x, const hx_request *req, req_ids *out, char *msg, size_t cap) {
    memset(out, 0, sizeof *out);
    switch (hx_request_kind_of(req)) {
    case HX_REQUEST_TOKENS: return copy_ids(out, req->tokens, req->n_tokens, "server tokenization");
    case HX_REQUEST_PROMPT:
        if (!x->id.llama_like) break;
        out->basis = "server tokenization";
        return probe_tokenize(x, req->prompt, true, &out->ids, &out->n, msg, cap);
    default:
        if (!x->id.llama_like) break;
        out->basis = "server tokenization";
        return probe_render_ids(x, req, &out->ids, &out->n, msg, cap);
    }
    snprintf(msg, cap, "the server offers no /tokenize and no -m was given: the prompt cannot be sent as token ids");
    return ENG_ERR_IO;
}

/* The prompt's ids for what the server saw, checked against the count it reported (n_server, -1:
 * unknown): the ids sent; else the server's read-back; else kvreplay's rendering. */
static int prompt_ids(probe_ctx *x, const hx_request *req, const hx_prepared *loc, const int32_t *sent,
                      int32_t n_sent, int64_t n_server, req_ids *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    why[0] = '\0';
    if (sent) {
        out->ids = malloc(sizeof(int32_t) * (size_t)(n_sent > 0 ? n_sent : 1));
        if (!out->ids) return ENG_ERR_NOMEM;
        memcpy(out->ids, sent, sizeof(int32_t) * (size_t)n_sent);
        out->n = n_sent;
        out->basis = n_server < 0 || n_server == n_sent ? "sent ids" : NULL;
        if (!out->basis) snprintf(why, cap, "the server counted %lld prompt tokens, %d were sent", (long long)n_server, n_sent);
        return ENG_OK;
    }
    int32_t *ids = NULL, n = 0;
    char msg[400] = "";
    if (x->id.llama_like && hx_request_kind_of(req) == HX_REQUEST_MESSAGES &&
        probe_render_ids(x, req, &ids, &n, msg, sizeof msg) == ENG_OK) {
        if (n_server < 0 || n == n_server) {
            out->ids = ids, out->n = n, out->basis = "server tokenization";
            return ENG_OK;
        }
        snprintf(why, cap, "the server's /apply-template + /tokenize give %d tokens, its response counted %lld", n,
                 (long long)n_server);
        free(ids);
    } else if (msg[0]) {
        snprintf(why, cap, "no read-back of the server's tokens (%s)", msg);
    }
    if (loc) {
        if (!(out->ids = malloc(sizeof(int32_t) * (size_t)(loc->n > 0 ? loc->n : 1)))) return ENG_ERR_NOMEM;
        memcpy(out->ids, loc->tokens, sizeof(int32_t) * (size_t)loc->n);
        out->n = loc->n;
        if (n_server < 0 || loc->n == n_server) {
            out->basis = "kvreplay rendering";
            why[0] = '\0';
        } else {
            size_t k = strlen(why);
            snprintf(why + k, cap - k, "%skvreplay's rendering gives %d tokens, the server counted %lld",
                     k ? "; " : "", loc->n, (long long)n_server);
        }
        return ENG_OK;
    }
    if (!why[0]) snprintf(why, cap, "no token read-back and no local rendering (-m)");
    return ENG_OK;
}

/* Where two id lists first differ, said: "token 12: kvreplay 345, server 678" ("" when equal). */
static void diff_ids(const int32_t *a, int32_t na, const int32_t *b, int32_t nb, char *out, size_t cap) {
    int32_t k = hx_lcp(a, na, b, nb);
    if (k == na && k == nb) { out[0] = '\0'; return; }
    if (k < na && k < nb) snprintf(out, cap, "token %d: kvreplay %d, server %d (kvreplay %d tokens, server %d)", k, a[k], b[k], na, nb);
    else snprintf(out, cap, "kvreplay %d tokens, server %d (the same up to token %d)", na, nb, k);
}

// ----------------------------------------------------------------------------
// What the server's cache holds, and what the runs gave

/* What the warm namespace holds after a run: the slot's or tree's new sequence. A cold run by
 * cache_prompt: false or erase runs in the slot too; a salted one elsewhere; reset and flush emptied
 * it first. */
static int note_run(probe_ctx *x, const int32_t *prompt, int32_t n_prompt, const probe_gen *g, bool cold) {
    if (cold && !strcmp(x->cold, "salt")) return ENG_OK;
    if (cold && (!strcmp(x->cold, "reset") || !strcmp(x->cold, "flush") || !strcmp(x->cold, "erase")))
        hx_held_clear(&x->held);
    if (!prompt || g->fail) {  /* the cache holds something we cannot name */
        hx_held_clear(&x->held);
        x->held_known = false;
        return ENG_OK;
    }
    bool ids = g->n_gen > 0;
    for (int32_t k = 0; k < g->n_gen; k++) ids = ids && g->ids[k] >= 0;
    if (cold && !x->held_known) x->held_known = !strcmp(x->cold, "reset") || !strcmp(x->cold, "flush") ||
                                                !strcmp(x->cold, "erase") || !x->rule.tree;
    return hx_held_add(&x->held, &x->rule, prompt, n_prompt, ids ? g->ids : NULL, ids ? g->n_gen : 0);
}


/* Compares a cold run with a warm one, position by position. */
static int compare_runs(const probe_ctx *x, const probe_gen *c, const probe_gen *w, cmp_out *o) {
    memset(o, 0, sizeof *o);
    o->fork = -1;
    o->json_equal = c->first_json && w->first_json
                        ? c->first_json_n == w->first_json_n && !memcmp(c->first_json, w->first_json, c->first_json_n)
                        : -1;
    int32_t n = c->n_gen < w->n_gen ? c->n_gen : w->n_gen;
    o->steps = calloc((size_t)(n > 0 ? n : 1), sizeof *o->steps);
    if (!o->steps) return ENG_ERR_NOMEM;
    o->decode_equal = c->n_gen == w->n_gen;
    bool probs = c->r.n_tokens > 0 && w->r.n_tokens > 0;
    for (int32_t k = 0; k < n; k++) {
        size_t la, lb;
        const char *ta = probe_gen_text(c, k, &la), *tb = probe_gen_text(w, k, &lb);
        bool same = hx_token_same(c->ids[k], ta, la, w->ids[k], tb, lb);
        hx_cmp ck;
        if (probs && k < c->r.n_tokens && k < w->r.n_tokens) hx_probs_compare(&c->r.tokens[k], &w->r.tokens[k], x->n_vocab, &ck);
        else {
            memset(&ck, 0, sizeof ck);
            ck.equal = ck.top1_equal = same;
            ck.first_diff = same ? -1 : 0;
            ck.kl = NAN;
        }
        if (k == 0) o->first = ck;
        hx_step_row *s = &o->steps[k];
        hx_step_row_init(s);
        hx_step_row_set_cmp(s, &ck);
        s->step = k;
        s->token_cold = c->ids[k];
        s->token_reuse = w->ids[k];
        if (!ck.equal || !same) o->decode_equal = false;
        if (o->fork < 0 && !same) o->fork = k;
    }
    if (o->fork < 0 && c->n_gen != w->n_gen) o->fork = n;
    if (n == 0) {
        memset(&o->first, 0, sizeof o->first);
        o->first.equal = o->first.top1_equal = c->n_gen == w->n_gen;
        o->first.first_diff = -1;
        o->first.kl = NAN;
    }
    o->n_steps = n;
    if (o->json_equal == 0) o->decode_equal = false;
    return ENG_OK;
}

typedef struct timing { double med, mn, mx; int n; } timing;

/* The median, min and max TTFT of n runs (NaN: none had a token). */
static timing timing_of(const probe_gen *g, int n) {
    timing r = {NAN, NAN, NAN, 0};
    double v[PROBE_MAX_RUNS];
    for (int i = 0; i < n; i++)
        if (g[i].ttft_ms >= 0) v[r.n++] = g[i].ttft_ms;
    if (!r.n) return r;
    r.mn = r.mx = v[0];
    for (int i = 1; i < r.n; i++) {
        if (v[i] < r.mn) r.mn = v[i];
        if (v[i] > r.mx) r.mx = v[i];
    }
    r.med = hx_median(v, r.n);
    return r;
}

// ----------------------------------------------------------------------------
// Rows

/* r's row (and its steps rows), in one transaction; counted in the summary. */
static int write_row(probe_ctx *x, probe_req *r, const hx_step_row *steps, int32_t n_steps) {
    char err[1024];
    hx_request_row *row = &r->row;
    row->req_index = r->idx;
    row->transcript = x->transcript;
    row->session = r->req->session;
    row->turn = r->req->turn;
    row->n_decode = x->sp->decode_n;
    if (row->n_prefilled < 0) row->n_prefilled = 0;
    int rc = hx_store_put_request(x->store, x->run_id, row, steps, n_steps, err, sizeof err);
    if (rc) fprintf(stderr, "kvreplay probe: %s\n", err);
    r->out->written = rc == ENG_OK;
    return rc;
}

/* A request the server failed (g, its which run): its row, and a line on stderr; r is done. */
static int fail_row(probe_ctx *x, probe_req *r, const probe_gen *g, const char *which) {
    char msg[1024];
    hx_request_row *row = &r->row;
    int64_t n_prompt_local = r->n_prompt_local;
    snprintf(msg, sizeof msg, "%s run: %s", which, g->msg);
    fprintf(stderr, "kvreplay probe: %s turn %d: %s: %s\n", r->req->session, r->req->turn, g->fail, msg);
    r->done = true;
    row->verified = false;
    row->error = g->fail;
    row->error_message = msg;
    row->http_status = g->status > 0 ? g->status : -1;
    row->n_prompt_local = n_prompt_local;
    if (row->n_prompt <= 0) row->n_prompt = n_prompt_local > 0 ? n_prompt_local : 0;
    row->n_prefilled = row->n_prompt - row->n_reused;
    r->out->failed = true;
    return write_row(x, r, NULL, 0);
}

// ----------------------------------------------------------------------------
// The steps

/* 1. The prompt as replay renders it (-m), and the same after the rules the server is expected to
 * apply; on the token route, the ids to send: kvreplay's, else the server's own rendering read back
 * (a server that cannot render it gets the request's row with the error, and r is done). */
static int step_prompt(probe_ctx *x, probe_req *r) {
    char err[1024] = "", msg[600] = "";
    int rc;
    if (x->pc) {
        if ((rc = hx_prepare(x->pc, r->req, &r->loc, err, sizeof err))) {
            fprintf(stderr, "kvreplay probe: %s\n", err);
            return rc;
        }
        r->have_loc = true;
    }
    if (r->normalizing) {
        if ((rc = hx_request_copy(&r->norm_req, r->req))) return rc;
        if (hx_normalize_apply(&x->nz, &r->norm_req) < 0) return ENG_ERR_NOMEM;
        if (x->pc_norm) {
            if ((rc = hx_prepare(x->pc_norm, &r->norm_req, &r->loc_norm, err, sizeof err))) {
                fprintf(stderr, "kvreplay probe: %s\n", err);
                return rc;
            }
            r->have_norm = true;
        }
    }
    r->n_prompt_local = r->have_loc ? r->loc.n : -1;
    if (x->route != PROBE_ROUTE_TOKENS) return ENG_OK;
    if (r->have_loc) rc = copy_ids(&r->sent, r->loc.tokens, r->loc.n, "sent ids");
    else if (!(rc = server_ids_of(x, r->req, &r->sent, msg, sizeof msg))) r->sent.basis = "sent ids";
    if (rc == ENG_OK || rc == ENG_ERR_NOMEM) return rc;
    probe_gen g;  /* the server could not render it: that request's row says so */
    memset(&g, 0, sizeof g);
    probe_gen_fail(&g, "render", "%s", msg);
    return fail_row(x, r, &g, "render");
}

/* Whether a server refused a run for its request of probabilities (llama-server: "logprobs is not
 * supported with tools + stream"). */
static bool refuses_probs(const probe_gen *w, const hx_api_req *q) {
    return w->fail && !strcmp(w->fail, "http") && w->status == 400 && q->params.n_probs > 0 &&
           strstr(w->msg, "logprobs");
}

/* 2. The warm run, through the cache as the previous requests left it (a server that refuses
 * probabilities is asked for the generated tokens only, from then on). A failed warm run is the
 * request's row, and r is done (stopping the run when the server refused the connection). */
static int step_warm(probe_ctx *x, probe_req *r) {
    int rc;
    if ((rc = probe_build_req(x, r->req, r->sent.ids, r->sent.n, &r->q)) || (rc = probe_set_warm(x, &r->q)) ||
        (rc = probe_generate(x, &r->q, &r->warm[r->n_warm++])))
        return rc;
    probe_gen *w = &r->warm[0];
    if (refuses_probs(w, &r->q)) {
        snprintf(x->no_probs, sizeof x->no_probs, "the server refuses probabilities here (%.120s)", w->msg);
        probe_say(x, "%s: comparing the generated tokens only", x->no_probs);
        hx_api_req_free(&r->q);
        probe_gen_free(w);
        r->n_warm = 0;
        if ((rc = probe_build_req(x, r->req, r->sent.ids, r->sent.n, &r->q)) || (rc = probe_set_warm(x, &r->q)) ||
            (rc = probe_generate(x, &r->q, &r->warm[r->n_warm++])))
            return rc;
    }
    if (w->fail) {
        r->row.n_prompt = probe_gen_n_prompt(w) > 0 ? probe_gen_n_prompt(w) : 0;
        note_run(x, NULL, 0, w, false);
        rc = fail_row(x, r, w, "warm");
        r->out->stop = !strcmp(w->fail, "refused");
        return rc;
    }
    r->row.n_probs = r->q.params.n_probs;
    return ENG_OK;
}

/* 4 (under --normalize). The same prompt after the rules, counted the same way: when the server
 * applies them itself, only the normalized prompt matches the count it reported. */
static int normalized_ids(probe_ctx *x, probe_req *r) {
    req_ids tmp = {0};
    const int32_t *ns = NULL;
    int32_t nns = 0;
    char why2[600], msg[600];
    if (x->route == PROBE_ROUTE_TOKENS) {
        if (r->have_norm) ns = r->loc_norm.tokens, nns = r->loc_norm.n;
        else if (server_ids_of(x, &r->norm_req, &tmp, msg, sizeof msg) == ENG_OK) ns = tmp.ids, nns = tmp.n;
    }
    int rc = prompt_ids(x, &r->norm_req, r->have_norm ? &r->loc_norm : NULL, ns, nns, r->srv.basis ? -1 : r->n_server,
                        &r->srv_norm, why2, sizeof why2);
    free(tmp.ids);
    if (rc) return rc;
    if (r->srv.basis && r->srv_norm.basis) r->srv_norm.basis = r->srv.basis;
    else if (!r->srv_norm.basis && why2[0]) snprintf(r->why, sizeof r->why, "%s", why2);
    else if (r->srv_norm.basis) r->why[0] = '\0';
    r->basis = &r->srv_norm;
    return ENG_OK;
}

/* 4. The ids the server saw, what it should have reused of them (on what its cache held before the
 * warm run), what it reported; the row's prompt and reuse columns; then the warm run noted as held. */
static int step_reuse(probe_ctx *x, probe_req *r) {
    const probe_gen *w = &r->warm[0];
    int rc;
    r->n_server = probe_gen_n_prompt(w);
    if ((rc = prompt_ids(x, r->req, r->have_loc ? &r->loc : NULL, r->sent.ids, r->sent.n, r->n_server, &r->srv, r->why,
                         sizeof r->why)))
        return rc;
    r->basis = &r->srv;
    if (r->normalizing && (rc = normalized_ids(x, r))) return rc;
    const req_ids *b = r->basis;
    r->exact = b->basis && b->ids && x->held_known;
    r->expected = b->ids ? hx_reuse_expected(&x->rule, &x->held, b->ids, b->n, &r->lcp) : -1;
    if (!x->held_known && !r->why[0])
        snprintf(r->why, sizeof r->why, "what the server's cache held before this request is unknown");
    r->reported = probe_gen_reused(x, w);
    if (r->have_loc && r->srv.ids && r->srv.basis && strcmp(r->srv.basis, "kvreplay rendering"))
        diff_ids(r->loc.tokens, r->loc.n, r->srv.ids, r->srv.n, r->diff, sizeof r->diff);
    hx_request_row *row = &r->row;
    row->n_prompt = r->n_server;
    row->n_prompt_local = r->n_prompt_local;
    row->reuse_expected = r->expected;
    row->reuse_reported = r->reported;
    row->reuse_basis = r->exact ? b->basis : NULL;
    row->n_reused = r->reported >= 0 ? r->reported : r->expected >= 0 ? r->expected : 0;
    row->n_prefilled = r->n_server - row->n_reused;
    row->lcp = b->ids ? r->lcp : -1;
    row->prompt_diff = r->diff[0] ? r->diff : NULL;
    return note_run(x, b->ids, b->ids ? b->n : 0, w, false);
}

/* The cache as the first warm run found it, for another warm run: emptied where the server allows
 * (a fresh warm salt, reset, flush; the slot erased before the first request), then the previous
 * request sent again. */
static int rewarm(probe_ctx *x) {
    char msg[600];
    bool empties = !strcmp(x->cold, "salt") || !strcmp(x->cold, "reset") || !strcmp(x->cold, "flush");
    if (!strcmp(x->cold, "salt")) probe_fresh_salt(x, x->salt_warm, sizeof x->salt_warm, "warm");
    else if (empties) probe_cache_control(x, x->cold, msg, sizeof msg);
    else if (!x->has_prev) probe_cache_control(x, "erase", msg, sizeof msg);
    if (empties || !x->has_prev) hx_held_clear(&x->held);
    if (!x->has_prev) return ENG_OK;
    probe_gen pg;
    int rc = probe_set_warm(x, &x->prev);
    if (rc) return rc;
    if (!(rc = probe_generate(x, &x->prev, &pg))) note_run(x, x->prev_ids, x->n_prev, &pg, false);
    probe_gen_free(&pg);
    return rc;
}

/* 3. The cold run(s), forced by the cold method, --repeat N times; then the warm run N - 1 times
 * more, each from the first one's cache state. A cold or repeated warm run that failed is the
 * request's row, and r is done (stopping the run when the server refused the connection). */
static int step_cold(probe_ctx *x, probe_req *r) {
    const req_ids *b = r->basis;
    char msg[600] = "";
    int rc;
    for (int k = 0; k < x->sp->repeat; k++) {
        probe_gen *c = &r->cold[r->n_cold++];
        memset(c, 0, sizeof *c);
        hx_api_result_init(&c->r);
        if ((rc = probe_set_cold(x, &r->q, msg, sizeof msg)) == ENG_ERR_NOMEM) return rc;
        if (rc) {
            probe_gen_fail(c, "cold", "%s", msg);
            break;
        }
        hx_api_result_free(&c->r);
        if ((rc = probe_generate(x, &r->q, c)) || (rc = note_run(x, b->ids, b->ids ? b->n : 0, c, true))) return rc;
        if (c->fail) break;
    }
    r->cold_reused = probe_gen_reused(x, &r->cold[0]);
    for (int k = 1; k < x->sp->repeat && !r->cold[r->n_cold - 1].fail; k++) {
        if ((rc = rewarm(x)) || (rc = probe_set_warm(x, &r->q))) return rc;
        probe_gen *w2 = &r->warm[r->n_warm++];
        if ((rc = probe_generate(x, &r->q, w2)) || (rc = note_run(x, b->ids, b->ids ? b->n : 0, w2, false))) return rc;
        if (w2->fail) break;
        eng_buf_printf(&r->rep, "%s%lld", r->rep.len ? "," : "", (long long)probe_gen_reused(x, w2));
    }
    probe_gen *c0 = &r->cold[0], *wl = &r->warm[r->n_warm - 1];
    probe_gen *bad = c0->fail ? c0 : wl->fail ? wl : NULL;
    if (!bad) return ENG_OK;
    rc = fail_row(x, r, bad, bad == c0 ? "cold" : "warm (repeat)");
    r->out->stop = !strcmp(bad->fail, "refused");
    return rc;
}

/* 5. Bits: the first cold run against the first warm run, position by position (and as the JSON
 * text of position 0); the cold runs against each other; a cold run must reuse nothing. */
static int step_bits(probe_ctx *x, probe_req *r) {
    int rc;
    if ((rc = compare_runs(x, &r->cold[0], &r->warm[0], &r->cmp))) return rc;
    hx_request_row_set_cmp(&r->row, &r->cmp.first);
    r->row.json_equal = r->cmp.json_equal;
    r->row.fork_step = r->cmp.fork;
    r->row.decode_equal = r->cmp.decode_equal;
    r->cold_agree = 1;
    for (int k = 1; k < r->n_cold; k++) {
        cmp_out c2;
        if ((rc = compare_runs(x, &r->cold[0], &r->cold[k], &c2))) return rc;
        if (!c2.decode_equal || c2.fork >= 0 || !c2.first.equal) r->cold_agree = 0;
        free(c2.steps);
    }
    const cmp_out *c = &r->cmp;
    r->identical = c->first.equal && c->decode_equal && c->fork < 0 && c->json_equal != 0 && r->cold_reused <= 0;
    return ENG_OK;
}

/* What a run generated, as bits: its ids, and its probabilities' ids and float bytes (FNV-1a 64). */
static void run_hashes(const probe_gen *g, uint64_t *tokens, uint64_t *probs) {
    uint64_t h = 1469598103934665603ull, p = h;
#define MIX(acc, v) do { uint64_t v_ = (uint64_t)(v); for (int b_ = 0; b_ < 8; b_++) { \
        acc ^= (v_ >> (8 * b_)) & 0xff; acc *= 1099511628211ull; } } while (0)
    for (int32_t k = 0; k < g->n_gen; k++) MIX(h, (uint32_t)g->ids[k]);
    for (int32_t k = 0; k < g->r.n_tokens; k++) {
        const hx_api_token *t = &g->r.tokens[k];
        uint32_t bits;
        memcpy(&bits, &t->logprob, 4);
        MIX(p, (uint32_t)t->id);
        MIX(p, bits);
        for (int32_t j = 0; j < t->n_top; j++) {
            memcpy(&bits, &t->top[j].logprob, 4);
            MIX(p, (uint32_t)t->top[j].id);
            MIX(p, bits);
        }
    }
#undef MIX
    *tokens = h;
    *probs = p ^ h;
}

static int64_t count_distinct(const uint64_t *v, int32_t n) {
    int64_t d = 0;
    for (int32_t i = 0; i < n; i++) {
        bool seen = false;
        for (int32_t j = 0; j < i && !seen; j++) seen = v[j] == v[i];
        d += !seen;
    }
    return d;
}

/* The batch columns of a run under load that differs from alone (c: their comparison). */
static void batch_diff(hx_request_row *row, const cmp_out *c, int32_t K) {
    for (int32_t k = 0; k < c->n_steps && row->batch_first_diff < 0; k++) {
        const hx_step_row *st = &c->steps[k];
        if (st->logits_equal) continue;
        row->batch_first_diff = (int64_t)k * K + (st->first_diff_index >= 0 ? st->first_diff_index : 0);
        row->batch_ulp_first = st->first_diff_index >= 0 ? (int64_t)st->ulp_first : -1;
    }
    if (row->batch_first_diff < 0) row->batch_first_diff = (int64_t)(c->fork >= 0 ? c->fork : 0) * K;
}

/* 5b (--concurrency K). The cold run sent again while K-1 fillers run (with --load-repeat N: N times,
 * each beside a seeded number of fillers, 0 to K-1), each compared with the cold run alone, position by
 * position: the row's batch verdict (every send equal; the first that differs: index position x K +
 * rank), and in extra.load the distinct generated ids and probabilities over the sends. A send that
 * failed is said and counted; the request's other verdicts stand. */
static int step_load(probe_ctx *x, probe_req *r) {
    if (x->concurrency <= 1) return ENG_OK;
    const int32_t N = x->load_repeat > 1 ? x->load_repeat : 1, K = r->q.params.n_probs > 0 ? r->q.params.n_probs : 1;
    uint64_t *ht = calloc((size_t)N + 1, sizeof *ht), *hp = calloc((size_t)N + 1, sizeof *hp);
    if (!ht || !hp) { free(ht); free(hp); return ENG_ERR_NOMEM; }
    run_hashes(&r->cold[0], &ht[0], &hp[0]);  /* alone first: the distinct counts include it */
    hx_request_row *row = &r->row;
    const req_ids *b = r->basis;
    uint64_t seed = x->load_seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)r->idx, max_ulp = 0;
    int32_t n_ok = 1, n_equal = 0, n_failed = 0, max_fill = 0;
    int rc = ENG_OK;
    for (int32_t n = 0; n < N && rc == ENG_OK; n++) {
        char msg[600] = "";
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const int32_t k_fill = N > 1 ? (int32_t)((seed >> 33) % (uint64_t)x->concurrency) : x->concurrency - 1;
        if ((rc = probe_set_cold(x, &r->q, msg, sizeof msg)) == ENG_ERR_NOMEM) break;
        if (rc) {
            probe_say(x, "%s turn %d: under load: the cold method failed: %s", r->req->session, r->req->turn, msg);
            rc = ENG_OK;
            n_failed++;
            continue;
        }
        probe_gen g;
        int32_t overlap = 0;
        if ((rc = probe_generate_loaded(x, &r->q, k_fill, seed, &g, &overlap)) ||
            (rc = note_run(x, b->ids, b->ids ? b->n : 0, &g, true))) {
            probe_gen_free(&g);
            break;
        }
        if (g.fail) {
            probe_say(x, "%s turn %d: under load: %s: %s", r->req->session, r->req->turn, g.fail, g.msg);
            n_failed++;
            probe_gen_free(&g);
            continue;
        }
        cmp_out c;
        if ((rc = compare_runs(x, &r->cold[0], &g, &c))) { probe_gen_free(&g); break; }
        const bool equal = c.first.equal && c.decode_equal && c.fork < 0 && c.json_equal != 0;
        for (int32_t k = 0; k < c.n_steps; k++) if (c.steps[k].max_ulp > max_ulp) max_ulp = c.steps[k].max_ulp;
        if (!equal && row->batch_first_diff < 0) {
            batch_diff(row, &c, K);
            fprintf(stderr, "kvreplay probe: %s turn %d: under load (%d fillers, %d still generating) DIFFERS from "
                    "alone: position %lld, candidate %lld (%lld ULP)%s\n", r->req->session, r->req->turn, k_fill,
                    overlap, (long long)(row->batch_first_diff / K), (long long)(row->batch_first_diff % K),
                    (long long)row->batch_ulp_first, c.fork >= 0 ? "; the greedy continuations fork" : "");
        }
        n_equal += equal;
        r->n_overlap += overlap;
        if (k_fill > max_fill) max_fill = k_fill;
        run_hashes(&g, &ht[n_ok], &hp[n_ok]);
        n_ok++;
        free(c.steps);
        if (!r->have_loaded) { r->loaded = g; r->have_loaded = true; }  /* the first, for the row's extra */
        else probe_gen_free(&g);
    }
    if (rc == ENG_OK && n_ok > 1) {
        row->batch_k = N > 1 ? max_fill : x->concurrency - 1;
        row->batch_equal = n_equal == n_ok - 1;
        row->batch_max_ulp = max_ulp > INT64_MAX ? INT64_MAX : (int64_t)max_ulp;
        r->out->batch_checked = true;
        r->out->batch_identical = row->batch_equal == 1;
    }
    snprintf(r->load, sizeof r->load, ",\"load\":{\"fillers\":%d,\"sends\":%d,\"failed\":%d,\"identical\":%d,"
             "\"overlapped\":%d,\"distinct_tokens\":%lld,\"distinct_probs\":%lld,\"ttft_ms\":%.3f}",
             N > 1 ? max_fill : x->concurrency - 1, n_ok - 1, n_failed, n_equal, r->n_overlap,
             (long long)count_distinct(ht, n_ok), (long long)count_distinct(hp, n_ok),
             r->have_loaded ? r->loaded.ttft_ms : -1.0);
    free(ht);
    free(hp);
    return rc;
}

/* The row's TTFTs (median, and with --repeat min and max), note and extra. */
static void row_details(probe_ctx *x, probe_req *r) {
    hx_request_row *row = &r->row;
    timing tmw = timing_of(r->warm, r->n_warm), tmc = timing_of(r->cold, r->n_cold);
    row->ttft_reuse_ms = tmw.med;
    row->ttft_cold_ms = tmc.med;
    if (x->sp->repeat > 1) {
        row->ttft_reuse_min_ms = tmw.mn, row->ttft_reuse_max_ms = tmw.mx;
        row->ttft_cold_min_ms = tmc.mn, row->ttft_cold_max_ms = tmc.mx;
    }
    if (r->cold_reused > 0)
        snprintf(r->note, sizeof r->note, "the cold run reported %lld reused tokens: the server did not honour "
                 "--cold %s, so warm was compared with warm", (long long)r->cold_reused, x->cold);
    else if (!r->exact)
        snprintf(r->note, sizeof r->note, "reuse not checked: %s", r->why[0] ? r->why : "no exact token ids");
    else if (x->no_probs[0]) snprintf(r->note, sizeof r->note, "%s: the generated tokens compared only", x->no_probs);
    else if (!r->cold_agree)
        snprintf(r->note, sizeof r->note, "the %d cold runs differ from each other: the server is not "
                 "deterministic at this request", r->n_cold);
    row->note = r->note[0] ? r->note : NULL;
    snprintf(r->extra, sizeof r->extra, "{\"cold\":\"%s\",\"cold_reused\":%lld,\"cold_runs_agree\":%d,"
             "\"warm_reused\":[%lld%s%s],\"n_gen_cold\":%d,\"n_gen_warm\":%d%s}", x->cold, (long long)r->cold_reused,
             r->cold_agree, (long long)r->reported, r->rep.len ? "," : "", r->rep.len ? r->rep.data : "",
             r->cold[0].n_gen, r->warm[0].n_gen, r->load);
    row->extra = r->extra;
}

/* The verdict: the request's outcome, and a line on stderr for a difference or a reuse other than
 * expected. */
static void verdict(probe_ctx *x, const probe_req *r) {
    const cmp_out *c = &r->cmp;
    bool judged = r->exact && r->reported >= 0;
    r->out->compared = true;
    r->out->identical = r->identical;
    r->out->reuse = !judged                      ? PROBE_REUSE_UNKNOWN
                    : r->reported < r->expected ? PROBE_REUSE_LESS
                    : r->reported > r->expected ? PROBE_REUSE_MORE
                                                : PROBE_REUSE_AS_EXPECTED;
    if (!r->identical) {
        char what[300], fork[96] = "";
        if (r->cold_reused > 0) snprintf(what, sizeof what, "the cold run reused %lld tokens", (long long)r->cold_reused);
        else if (!c->first.equal)
            snprintf(what, sizeof what, "first position, candidate %lld: cold %a, warm %a (%llu ULP)%s",
                     (long long)c->first.first_diff, (double)c->first.a_first, (double)c->first.b_first,
                     (unsigned long long)c->first.ulp_first, c->json_equal == 0 ? ", JSON text differs" : "");
        else if (c->json_equal == 0) snprintf(what, sizeof what, "first position: the JSON text differs, not the bits");
        else snprintf(what, sizeof what, "the first position is identical");
        if (c->fork >= 0) snprintf(fork, sizeof fork, "; the greedy continuations fork at step %d", c->fork);
        else if (!c->decode_equal) snprintf(fork, sizeof fork, "; a later position's probabilities differ");
        fprintf(stderr, "kvreplay probe: %s turn %d: warm DIFFERS from cold: %s%s\n", r->req->session, r->req->turn,
                what, fork);
    }
    if (judged && r->reported != r->expected)
        fprintf(stderr, "kvreplay probe: %s turn %d: reused %lld tokens, %s than the %lld expected (%s, %s)\n",
                r->req->session, r->req->turn, (long long)r->reported, r->reported < r->expected ? "LESS" : "MORE",
                (long long)r->expected, hx_engine_name(x->rule.engine), r->basis->basis);
}

/* 6. The row, with its steps rows, in one transaction; then the request as sent is kept for the
 * next one's rewarm (--repeat), with the ids the server holds of it. */
static int step_row(probe_ctx *x, probe_req *r) {
    row_details(x, r);
    verdict(x, r);
    int rc = write_row(x, r, r->cmp.steps, r->cmp.n_steps);
    hx_api_req_free(&x->prev);
    x->prev = r->q;
    hx_api_req_init(&r->q);
    x->has_prev = true;
    free(x->prev_ids);
    req_ids *b = r->basis == &r->srv ? &r->srv : &r->srv_norm;
    x->prev_ids = b->ids, x->n_prev = b->n;
    b->ids = NULL;
    return rc;
}

// ----------------------------------------------------------------------------
// One request

static void req_free(probe_req *r) {
    eng_buf_free(&r->rep);
    free(r->cmp.steps);
    if (r->have_loaded) probe_gen_free(&r->loaded);
    for (int k = 0; k < r->n_warm; k++) probe_gen_free(&r->warm[k]);
    for (int k = 0; k < r->n_cold; k++) probe_gen_free(&r->cold[k]);
    free(r->sent.ids);
    free(r->srv.ids);
    free(r->srv_norm.ids);
    hx_api_req_free(&r->q);
    if (r->have_loc) hx_prepared_free(&r->loc);
    if (r->have_norm) hx_prepared_free(&r->loc_norm);
    hx_request_free(&r->norm_req);
}

int probe_request(probe_ctx *x, int32_t idx, hx_request *req, probe_outcome *out) {
    memset(out, 0, sizeof *out);
    probe_req *r = calloc(1, sizeof *r);  /* 2 x 64 runs of about 1 KB: the heap, not the stack */
    if (!r) return ENG_ERR_NOMEM;
    r->idx = idx;
    r->req = req;
    r->out = out;
    r->normalizing = x->sp->normalize && x->sp->normalize[0];
    hx_api_req_init(&r->q);
    hx_request_row_init(&r->row);
    int rc;
    if ((rc = step_prompt(x, r)) || r->done) goto done;
    if ((rc = step_warm(x, r)) || r->done) goto done;
    if ((rc = step_reuse(x, r))) goto done;  /* before the cold runs change what the cache holds */
    if ((rc = step_cold(x, r)) || r->done) goto done;
    if ((rc = step_bits(x, r))) goto done;
    if ((rc = step_load(x, r))) goto done;
    rc = step_row(x, r);
done:
    req_free(r);
    free(r);
    return rc;
}
