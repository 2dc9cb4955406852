/*
 * harness/serve/serve.c: the HTTP front of `kvreplay serve` (see serve.h):
 * libmicrohttpd with one thread per connection, the API layer's endpoint
 * registry for routing and bodies, authentication, the body limit, the
 * endpoints that need no engine, and the server's start and clean stop.
 *
 * A request's life on its connection thread: it is charged the memory its
 * body will take to prepare (admit.c: 503 with Retry-After beyond
 * --max-prep-memory, at its headers when Content-Length is given); the body
 * is read (413 as soon as it passes --max-body; a client that stalls is
 * dropped after --timeout seconds of silence, holding only its own thread);
 * the route is found (404, 405); the key checked (401); a large body waits
 * for a preparation lane; the body is parsed by its dialect (400 naming the
 * field) and, unless --record keeps it, freed; a generation is rendered and
 * tokenized here only as far as the context allows (hx_prepare_upto: the
 * same tokens as replay's hx_prepare for a prompt that fits; 400 naming both
 * lengths, the prompt's as a lower bound, for one that does not) and queued
 * for the engine worker (503 with Retry-After when the queue is full), its
 * charge cut to what it keeps. The connection thread then waits for the
 * prompt to be done and answers: a stream from that moment, or the whole
 * body at the end. While it waits it watches its socket: a client that goes
 * away cancels its request. The charge is released when the request ends.
 *
 * Headers of a generation: X-Kvreplay-Prompt-Tokens and X-Kvreplay-Reused
 * (tokens whose state came from the cache), X-Kvreplay-Identical ("true",
 * "false" or "unverified": with --verify, whether the reused run is
 * bit-identical to the cold one; for a streamed response, which leaves
 * before its decode steps, it covers the prompt: the last prompt token's
 * logits and the state after the prompt; a non-streamed response's covers
 * those and every compared decode step, and a stream's last event is an SSE
 * comment with that whole verdict), X-Kvreplay-Session (session and turn),
 * X-Kvreplay-Script (with --script: the turn played, a departure, or a side
 * request).
 */
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "json.h"
#include "jsonl.h"
#include "serve_int.h"
#include "status.h"
#include "str.h"
#include "util.h"
#include "version.h"

void hx_serve_opts_default(hx_serve_opts *o) {
    memset(o, 0, sizeof *o);
    hx_session_params_default(&o->sp);
    o->sp.verify = false;
    o->listen = "127.0.0.1:8080";
    o->n_predict = 256;
    o->max_body = (int64_t)32 << 20;
    o->max_prep = (int64_t)1 << 30;
    o->queue = 64;
    o->parallel = 1;
    o->partial_prefills = 1;
    o->timeout_s = 30;
    o->max_connections = 256;
}

int hx_serve_dialect_index(const hx_api_dialect *d) {
    for (int i = 0; hx_api_dialects[i] && i < HX_METRICS_DIALECTS; i++)
        if (hx_api_dialects[i] == d) return i;
    return 0;
}

// ----------------------------------------------------------------------------
// Connections

typedef struct conn {
    hx_server              *s;
    struct MHD_Connection  *c;
    eng_buf                 body;
    bool                    answered;   /* a response is queued (413 before the body ended) */
    bool                    too_large;  /* the body grew past --max-body: discarded, 413 at its end */
    bool                    no_room;    /* the body grew past what --max-prep-memory had left: discarded, 503 */
    int64_t                 charged;    /* bytes charged to the admission (admit.c), released at the end */
    int64_t                 announced;  /* Content-Length (0: none) */
    hx_job                 *job;        /* a generation in flight */
    int64_t                 seq;
    double                  t0;
} conn;

/* The dialect whose error shape answers a path no route has. */
static const hx_api_dialect *dialect_for_path(const char *url) {
    if (!strncmp(url, "/v1/messages", 12)) return hx_api_dialect_find("anthropic");
    if (!strncmp(url, "/v1beta/", 8) || (strstr(url, "/models/") && strchr(url, ':'))) return hx_api_dialect_find("gemini");
    if (!strncmp(url, "/v1/", 4)) return hx_api_dialect_find("openai");
    return hx_api_dialect_find("llama");
}

static int socket_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Whether the client closed its end (a hangup, or EOF without pipelined bytes). */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0;
    }
    return false;
}

static void add_common_headers(struct MHD_Response *r, const char *type) {
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Server", "kvreplay");
}

static enum MHD_Result send_bytes(conn *cn, int status, const char *type, const char *data, size_t n) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    add_common_headers(r, type);
    enum MHD_Result ok = MHD_queue_response(cn->c, (unsigned)status, r);
    MHD_destroy_response(r);
    cn->answered = true;
    return ok;
}

static enum MHD_Result send_json(conn *cn, int status, json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!t) return send_bytes(cn, 500, "text/plain", "out of memory\n", 14);
    enum MHD_Result ok = send_bytes(cn, status, "application/json; charset=utf-8", t, strlen(t));
    free(t);
    return ok;
}

static void log_line(conn *cn, const char *method, const char *url, int status, const char *what) {
    fprintf(stderr, "kvreplay serve: #%lld %s %s %d%s%s (%.1f ms)\n", (long long)cn->seq, method, url, status,
            what && what[0] ? " " : "", what ? what : "", 1e3 * (eng_now_s() - cn->t0));
}

/* An error answered in dialect d's shape, with its status (and Retry-After for 503). */
static enum MHD_Result send_error(conn *cn, const hx_api_dialect *d, const hx_api_error *e, const char *method,
                                  const char *url) {
    json_t *o = hx_api_error_body(d, e);
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    struct MHD_Response *r = t ? MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_COPY) : NULL;
    free(t);
    if (!r) return MHD_NO;
    add_common_headers(r, "application/json; charset=utf-8");
    if (e->kind == HX_API_ERR_UNAVAILABLE) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", e->retry_after > 0 ? e->retry_after : 1);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (e->kind == HX_API_ERR_METHOD) MHD_add_response_header(r, "Allow", "GET, POST");
    enum MHD_Result ok = MHD_queue_response(cn->c, (unsigned)e->status, r);
    MHD_destroy_response(r);
    cn->answered = true;
    hx_metrics_status(&cn->s->metrics, hx_serve_dialect_index(d), e->status);
    log_line(cn, method, url, e->status, e->message);
    return ok;
}

// ----------------------------------------------------------------------------
// What the record keeps of a request: its target and the headers that shape the prompt or the session

typedef struct header_acc { json_t *o; } header_acc;

static bool is_secret(const char *k) {
    static const char *const bad[] = {"authorization", "x-api-key", "cookie", "proxy-authorization"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!strcasecmp(k, bad[i])) return true;
    return strcasestr(k, "key") || strcasestr(k, "token") || strcasestr(k, "secret") || strcasestr(k, "auth");
}

static enum MHD_Result keep_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    header_acc *h = cls;
    if (!key || !value || is_secret(key)) return MHD_YES;
    static const char *const keep[] = {"anthropic-beta", "anthropic-version", "user-agent", "x-app", "openai-beta"};
    bool yes = strcasestr(key, "session") != NULL;
    for (size_t i = 0; !yes && i < sizeof keep / sizeof keep[0]; i++) yes = !strcasecmp(key, keep[i]);
    if (yes) {
        char lower[128];
        size_t n = strlen(key) < sizeof lower - 1 ? strlen(key) : sizeof lower - 1;
        for (size_t i = 0; i < n; i++) lower[i] = (char)(key[i] >= 'A' && key[i] <= 'Z' ? key[i] + 32 : key[i]);
        lower[n] = '\0';
        json_t *v = json_string(value);  /* NULL for a value that is not UTF-8: not kept */
        if (v) json_object_set_new(h->o, lower, v);
    }
    return MHD_YES;
}

typedef struct query_acc { eng_buf b; } query_acc;

static enum MHD_Result add_query(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    query_acc *q = cls;
    eng_buf_printf(&q->b, "%s%s%s%s", q->b.len ? "&" : "", key ? key : "", value ? "=" : "", value ? value : "");
    return MHD_YES;
}

// ----------------------------------------------------------------------------
// Endpoints that need no engine

static void fill_slots(hx_server *s, hx_api_info *info, hx_api_slot *copy, int32_t cap) {
    pthread_mutex_lock(&s->slots_mu);
    int32_t n = s->n_slots < cap ? s->n_slots : cap;
    memcpy(copy, s->slots, sizeof *copy * (size_t)n);
    pthread_mutex_unlock(&s->slots_mu);
    info->slots = copy;
    info->n_slots = n;
}

/* The context error (llama-server's message, both counts); n is a lower bound unless counted. */
static int context_error(const hx_server *s, hx_api_error *e, int64_t n, bool counted) {
    hx_api_errf(e, HX_API_ERR_CONTEXT, NULL,
                "request (%lld tokens) exceeds the available context size (%d tokens), try increasing it%s",
                (long long)n, s->n_ctx, counted ? "" : " (the count is a lower bound: serve tokenizes a prompt only "
                "as far as the context)");
    e->n_prompt_tokens = n;
    e->n_ctx = s->n_ctx;
    return ENG_ERR_RANGE;
}

/* /tokenize: the ids of a text of at most a context's tokens. */
static int answer_tokenize(hx_server *s, hx_api_req *q, hx_api_result *r, hx_api_error *e) {
    const hx_api_params *p = &q->params;
    const char *text = q->req.prompt ? q->req.prompt : "";
    size_t len = strlen(text);
    bool bos = p->add_special && eng_tokenizer_add_bos(s->tok) && eng_tokenizer_bos(s->tok) >= 0, more = false;
    int32_t *ids = malloc(sizeof *ids * (size_t)s->n_ctx);
    int32_t n = ids ? eng_tokenize_upto(s->tok, text, len, bos, false, p->parse_special, s->n_ctx, ids, NULL, &more)
                    : INT32_MIN;
    if (n == INT32_MIN) { free(ids); return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); }
    if (more) {
        free(ids);
        bool counted = false;
        int64_t over = hx_tokens_over(s->tok, text, len, bos, p->parse_special, s->n_ctx, &counted);
        return context_error(s, e, over, counted);
    }
    char buf[512];
    for (int32_t i = 0; i < n; i++) {
        int64_t k = hx_token_bytes(s, ids[i], buf, sizeof buf);
        hx_api_token t = {.id = ids[i], .text = buf, .len = k > 0 ? (size_t)k : 0, .logprob = NAN};
        if (hx_api_result_push_token(r, &t)) { free(ids); return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); }
    }
    free(ids);
    return ENG_OK;
}

/* /tokenize, /detokenize, /apply-template, count_tokens: as far as a context's tokens. */
static int answer_text_op(hx_server *s, hx_api_req *q, hx_api_result *r, hx_api_error *e) {
    if (q->route->op == HX_API_OP_TOKENIZE) return answer_tokenize(s, q, r, e);
    if (q->route->op == HX_API_OP_DETOKENIZE) {  /* llama-server: the pieces concatenated */
        if (q->req.n_tokens > s->n_ctx)
            return hx_api_errf(e, HX_API_ERR_INVALID, "tokens", "%d ids: serve detokenizes a context's worth (%d) at most",
                               q->req.n_tokens, s->n_ctx);
        eng_buf b = {0};
        char buf[512];
        for (int32_t i = 0; i < q->req.n_tokens; i++) {
            if (q->req.tokens[i] >= s->n_vocab) {
                eng_buf_free(&b);
                char f[32];
                snprintf(f, sizeof f, "tokens[%d]", i);
                return hx_api_errf(e, HX_API_ERR_INVALID, f, "id %d is outside the vocabulary [0, %d)", q->req.tokens[i],
                                   s->n_vocab);
            }
            int64_t len = hx_token_bytes(s, q->req.tokens[i], buf, sizeof buf);
            if (len > 0) eng_buf_append(&b, buf, (size_t)len);
        }
        r->text = hx_api_utf8_sanitize(b.data ? b.data : "", b.len, NULL);
        eng_buf_free(&b);
        return r->text ? ENG_OK : hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    }
    /* apply-template: replay's own rendering; count_tokens: its tokens, as far as the context */
    char err[768];
    int rc;
    if (q->route->op == HX_API_OP_APPLY_TEMPLATE) {
        hx_render text;
        if ((rc = hx_prepare_render(s->pc, &q->req, &text, err, sizeof err)) == ENG_OK) {
            r->text = text.text ? hx_strdup(text.text) : hx_strdup("");
            hx_render_free(&text);
            if (!r->text) rc = ENG_ERR_NOMEM;
        }
    } else {
        hx_prepared pp;
        hx_prepare_budget b = {.max_tokens = s->n_ctx};
        if ((rc = hx_prepare_upto(s->pc, &q->req, &b, &pp, err, sizeof err)) == ENG_ERR_RANGE)
            return context_error(s, e, b.at_least, b.counted);
        if (rc == ENG_OK) r->n_input_tokens = pp.n;
        hx_prepared_free(&pp);
    }
    if (rc) return rc == ENG_ERR_NOMEM ? hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory")
                                      : hx_api_errf(e, HX_API_ERR_INVALID, NULL, "%s", err);
    return ENG_OK;
}

static enum MHD_Result answer_simple(conn *cn, const hx_api_route *rt, hx_api_req *q, const char *method,
                                     const char *url) {
    hx_server *s = cn->s;
    hx_api_result r;
    hx_api_result_init(&r);
    hx_api_error e;
    hx_api_info info = s->info;
    hx_api_slot slots[64];
    r.info = &info;
    r.created = (int64_t)time(NULL);
    int rc = ENG_OK;
    switch (rt->op) {
    case HX_API_OP_METRICS: {
        char *t = hx_metrics_text(&s->metrics);
        enum MHD_Result ok = t ? send_bytes(cn, 200, "text/plain; version=0.0.4", t, strlen(t)) : MHD_NO;
        free(t);
        hx_metrics_status(&s->metrics, 0, 200);
        log_line(cn, method, url, 200, NULL);
        return ok;
    }
    case HX_API_OP_SLOTS:
        fill_slots(s, &info, slots, 64);
        break;
    case HX_API_OP_SLOT_ACTION: {
        pthread_mutex_lock(&s->engine_mu);  /* between two engine steps */
        bool busy = q->params.slot_id >= 0 && q->params.slot_id < s->n_slots && s->at[q->params.slot_id];
        int64_t n = busy ? ENG_ERR_RANGE : hx_policy_erase(hx_session_policy(s->session), q->params.slot_id);
        pthread_mutex_unlock(&s->engine_mu);
        if (n == ENG_ERR_UNSUPPORTED)
            rc = hx_api_errf(&e, HX_API_ERR_NOT_SUPPORTED, NULL, "the policy %s has no slots to erase", s->o->sp.policy);
        else if (busy) rc = hx_api_errf(&e, HX_API_ERR_UNAVAILABLE, "id_slot", "Slot %d is busy", q->params.slot_id);
        else if (n < 0) rc = hx_api_errf(&e, HX_API_ERR_INVALID, "id_slot", "Invalid slot ID");
        else info.n_erased = n;
        if (!rc) {
            pthread_mutex_lock(&s->slots_mu);
            if (q->params.slot_id < s->n_slots) s->slots[q->params.slot_id].n_tokens = 0;
            pthread_mutex_unlock(&s->slots_mu);
        }
        break;
    }
    case HX_API_OP_TOKENIZE: case HX_API_OP_DETOKENIZE: case HX_API_OP_APPLY_TEMPLATE: case HX_API_OP_COUNT_TOKENS:
        rc = answer_text_op(s, q, &r, &e);
        break;
    default:
        break;
    }
    enum MHD_Result ok;
    if (rc) ok = send_error(cn, rt->dialect, &e, method, url);
    else {
        ok = send_json(cn, 200, rt->respond(q, &r));
        hx_metrics_status(&s->metrics, hx_serve_dialect_index(rt->dialect), 200);
        log_line(cn, method, url, 200, NULL);
    }
    r.info = NULL;
    hx_api_result_free(&r);
    return ok;
}

// ----------------------------------------------------------------------------
// Generations: queued for the worker, answered as they come

typedef struct stream_ctx {
    hx_server *s;
    hx_job    *job;
    int        fd;
} stream_ctx;

/* Waits (cancelling on a client that left) until pred holds on j; j->mu held. */
static bool wait_job(hx_job *j, int fd, bool (*pred)(const hx_job *)) {
    while (!pred(j)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!pred(j) && client_gone(fd)) {
            atomic_store(&j->cancelled, true);
            return false;
        }
    }
    return true;
}

static bool headers_ready(const hx_job *j) { return j->state >= JOB_HEADERS; }
static bool done(const hx_job *j) { return j->state == JOB_DONE; }
static bool more_or_done(const hx_job *j) { return j->out.len > j->sent || j->state == JOB_DONE; }

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *sc = cls;
    hx_job *j = sc->job;
    pthread_mutex_lock(&j->mu);
    bool alive = wait_job(j, sc->fd, more_or_done);
    ssize_t n;
    if (!alive) n = MHD_CONTENT_READER_END_WITH_ERROR;
    else if (j->out.len > j->sent) {
        size_t k = j->out.len - j->sent < max ? j->out.len - j->sent : max;
        memcpy(buf, j->out.data + j->sent, k);
        j->sent += k;
        n = (ssize_t)k;
    } else {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    job_unref(sc->job);
    free(sc);
}

static void add_job_headers(struct MHD_Response *r, const hx_job *j) {
    MHD_add_response_header(r, "X-Kvreplay-Prompt-Tokens", j->h_prompt);
    MHD_add_response_header(r, "X-Kvreplay-Reused", j->h_reused);
    MHD_add_response_header(r, "X-Kvreplay-Identical", j->h_identical);
    MHD_add_response_header(r, "X-Kvreplay-Session", j->h_session);
    if (j->h_script[0]) MHD_add_response_header(r, "X-Kvreplay-Script", j->h_script);
}

static enum MHD_Result answer_generate(conn *cn, const hx_api_route *rt, hx_job *j, const char *method,
                                       const char *url) {
    hx_server *s = cn->s;
    int fd = socket_of(cn->c);
    if (!hx_worker_submit(s, j)) {
        hx_api_error e;
        pthread_mutex_lock(&s->q_mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->q_mu);
        hx_api_errf(&e, HX_API_ERR_UNAVAILABLE, NULL, stopping ? "the server is stopping"
                    : "the queue is full (%d requests wait for the engine): retry later", s->q_cap);
        e.retry_after = 1;
        return send_error(cn, rt->dialect, &e, method, url);
    }
    pthread_mutex_lock(&j->mu);
    bool alive = wait_job(j, fd, j->q.params.stream ? headers_ready : done);
    if (!alive) {
        pthread_mutex_unlock(&j->mu);
        log_line(cn, method, url, 499, "the client went away");
        return MHD_NO;  /* nobody to answer */
    }
    snprintf(j->h_session, sizeof j->h_session, "%s turn %d", j->q.req.session ? j->q.req.session : "", j->q.req.turn);
    if (j->status >= 400 || (j->state == JOB_DONE && j->status == 0)) {
        hx_api_error e = j->err;
        if (!e.status) hx_api_errf(&e, HX_API_ERR_SERVER, NULL, "the request failed");
        pthread_mutex_unlock(&j->mu);
        return send_error(cn, rt->dialect, &e, method, url);
    }
    struct MHD_Response *r;
    if (j->q.params.stream) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (!sc) { pthread_mutex_unlock(&j->mu); return MHD_NO; }
        sc->s = s;
        sc->job = j;
        sc->fd = fd;
        job_ref(j);
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free);
        if (!r) { pthread_mutex_unlock(&j->mu); stream_free(sc); return MHD_NO; }
        add_common_headers(r, "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
    } else {  /* the answer's body, rendered here from the result the worker left */
        json_t *body = j->q.route->respond(&j->q, &j->res);
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        r = text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY) : NULL;
        free(text);
        if (!r) { pthread_mutex_unlock(&j->mu); return MHD_NO; }
        add_common_headers(r, "application/json; charset=utf-8");
    }
    add_job_headers(r, j);
    int status = j->status ? j->status : 200;
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result ok = MHD_queue_response(cn->c, (unsigned)status, r);
    MHD_destroy_response(r);
    cn->answered = true;
    hx_metrics_status(&s->metrics, hx_serve_dialect_index(rt->dialect), status);
    return ok;
}

/* Parses, prepares and checks a generation; a job ready to queue (its charge cut to what it keeps),
 * or an error in e. The body is freed once parsed, or moved into the job when --record keeps it. */
static hx_job *make_job(conn *cn, const hx_api_route *rt, const char *path, const char *query, hx_api_error *e) {
    hx_server *s = cn->s;
    hx_job *j = job_new();
    if (!j) { hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); return NULL; }
    j->route = rt;
    j->seq = cn->seq;
    j->t_received = eng_now_s();
    if (rt->parse(rt, path, query, cn->body.data, cn->body.len, &j->q, e) != ENG_OK) goto fail;
    bool keep_body = s->o->record != NULL;  /* the record's served.body: the body as received */
    if (!keep_body) eng_buf_free(&cn->body);
    /* the prompt, the compared decode steps and a margin for the response's end marker must fit;
     * j->received: the prompt as received (--record keeps it before --normalize rewrites j->q.req) */
    int32_t R = s->o->sp.verify ? (s->o->sp.decode_n > 1 ? s->o->sp.decode_n : 1) : 1;
    hx_prepare_budget b = {.max_tokens = s->n_ctx - R - 16, .received = &j->received};
    char err[768];
    int rc = hx_prepare_upto(s->pc, &j->q.req, &b, &j->p, err, sizeof err);
    if (rc == ENG_ERR_RANGE) {
        context_error(s, e, b.at_least, b.counted);
        goto fail;
    }
    if (rc) {
        hx_api_errf(e, rc == ENG_ERR_NOMEM ? HX_API_ERR_SERVER : HX_API_ERR_INVALID, NULL, "%s", err);
        goto fail;
    }
    if (j->q.params.id_slot >= s->n_slots) {
        hx_api_errf(e, HX_API_ERR_INVALID, "id_slot", "id_slot %d: the server has %d slot%s", j->q.params.id_slot,
                    s->n_slots, s->n_slots == 1 ? "" : "s");
        goto fail;
    }
    if (keep_body) {  /* moved, not copied */
        if (!cn->body.data && eng_buf_append(&cn->body, "", 0)) { hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); goto fail; }
        j->body = cn->body.data;
        j->body_len = cn->body.len;
        cn->body = (eng_buf){0};
    }
    eng_buf t = {0};
    eng_buf_printf(&t, "%s%s%s", path, query && query[0] ? "?" : "", query ? query : "");
    j->target = t.data;
    header_acc h = {json_object()};
    if (h.o) MHD_get_connection_values(cn->c, MHD_HEADER_KIND, keep_header, &h);
    j->headers = h.o ? hx_json_canonical(h.o) : NULL;
    json_decref(h.o);
    if (!(j->key = hx_serve_session_key(&j->received))) {
        hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        goto fail;
    }
    /* what greedy decoding does not honour of the sampling asked, and the fields ignored: counted */
    bool honoured = hx_api_sampling_honoured(&j->q.params.sampling, j->sampling, sizeof j->sampling);
    pthread_mutex_lock(&s->metrics.mu);
    if (!honoured) s->metrics.sampling_not_honoured++;
    pthread_mutex_unlock(&s->metrics.mu);
    if (j->q.params.ignored) hx_metrics_ignored(&s->metrics, j->q.ignored_paths, j->q.n_ignored, stderr);
    /* the charge: from what preparing could take down to what the job keeps */
    int64_t keep = hx_admit_retained(&s->admit, (int64_t)j->body_len, (int64_t)j->p.text_len, j->p.n + j->p.n_resp);
    if (keep < cn->charged) {
        hx_admit_release(&s->admit, cn->charged - keep);
        cn->charged = keep;
    }
    return j;
fail:
    job_unref(j);
    return NULL;
}

// ----------------------------------------------------------------------------
// The access handler

/* Raises cn's charge to what a body of len bytes and n_values JSON values may take to prepare
 * (lowers it when the estimate fell); false when the admission has no room for the rise now. */
static bool charge_to(conn *cn, int64_t len, int64_t n_values) {
    hx_admit *a = &cn->s->admit;
    int64_t want = hx_admit_estimate(a, len, n_values);
    if (want < cn->charged) hx_admit_release(a, cn->charged - want);
    else if (want > cn->charged && !hx_admit_charge(a, want - cn->charged, len > HX_ADMIT_LARGE)) return false;
    cn->charged = want;
    return true;
}

/* 413: a body that --max-prep-memory could never admit (n_values: its JSON values). */
static enum MHD_Result refuse_never(conn *cn, const hx_api_dialect *d, const char *method, const char *url,
                                   int64_t len, int64_t n_values) {
    hx_server *s = cn->s;
    hx_api_error e;
    hx_api_errf(&e, HX_API_ERR_TOO_LARGE, NULL, "the body (%lld bytes, %lld JSON values) would take about %lld bytes "
                "to prepare, more than --max-prep-memory allows one request (%lld)", (long long)len,
                (long long)n_values, (long long)hx_admit_estimate(&s->admit, len, n_values),
                (long long)hx_admit_room(&s->admit, len > HX_ADMIT_LARGE));
    eng_buf_free(&cn->body);
    return send_error(cn, d, &e, method, url);
}

/* 503: the requests in preparation hold what --max-prep-memory allows (len: the body's announced
 * length, -1 when it came chunked). */
static enum MHD_Result refuse_no_room(conn *cn, const hx_api_dialect *d, const char *method, const char *url,
                                      long long len) {
    hx_server *s = cn->s;
    hx_api_error e;
    char what[64] = "";
    if (len >= 0) snprintf(what, sizeof what, " (a body of %lld bytes)", len);
    hx_api_errf(&e, HX_API_ERR_UNAVAILABLE, NULL, "the requests in preparation hold what --max-prep-memory allows "
                "(%lld bytes): this one%s would pass it; retry later", (long long)s->o->max_prep, what);
    e.retry_after = 1;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.refused_memory++;
    pthread_mutex_unlock(&s->metrics.mu);
    eng_buf_free(&cn->body);
    return send_error(cn, d, &e, method, url);
}

static bool authorized(hx_server *s, struct MHD_Connection *c, const char *url) {
    if (!s->o->api_key) return true;
    static const char *const open_paths[] = {"/health", "/v1/health", "/models", "/v1/models"};  /* llama-server's */
    for (size_t i = 0; i < sizeof open_paths / sizeof open_paths[0]; i++)
        if (!strcmp(url, open_paths[i])) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) a += 7;
    if (!a) a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return a && !strcmp(a, s->o->api_key);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    hx_server *s = cls;
    conn *cn = *con_cls;
    if (!cn) {  /* the headers: a body announced over the limit is refused before it is read */
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        cn->s = s;
        cn->c = c;
        cn->t0 = eng_now_s();
        pthread_mutex_lock(&s->q_mu);
        cn->seq = s->n_seq++;
        pthread_mutex_unlock(&s->q_mu);
        *con_cls = cn;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        long long announced = cl ? strtoll(cl, NULL, 10) : 0;
        if (announced > s->o->max_body) {
            hx_api_error e;
            hx_api_errf(&e, HX_API_ERR_TOO_LARGE, NULL, "the body (%s bytes) is over the limit of %lld bytes (--max-body)",
                        cl, (long long)s->o->max_body);
            return send_error(cn, dialect_for_path(url), &e, method, url);
        }
        /* the memory preparing it may take, charged before the body is read; its buffer in one piece */
        if (!charge_to(cn, announced > 0 ? announced : 0, 0))
            return refuse_no_room(cn, dialect_for_path(url), method, url, announced);
        if (announced > 0 && (cn->body.data = malloc((size_t)announced + 1))) cn->body.cap = (size_t)announced + 1;
        cn->announced = announced > 0 ? announced : 0;
        return MHD_YES;
    }
    if (*upload_size) {  /* a body that grows past a limit (chunked) is read to its end, not kept, then refused */
        size_t total = cn->body.len + *upload_size;
        if (cn->answered || cn->too_large || cn->no_room) {
        } else if (total > (size_t)s->o->max_body) {
            cn->too_large = true;
            eng_buf_free(&cn->body);
        } else if ((int64_t)total > cn->announced && !charge_to(cn, (int64_t)total, 0)) {
            cn->no_room = true;
            eng_buf_free(&cn->body);
        } else if (eng_buf_append(&cn->body, upload, *upload_size)) {
            return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cn->answered) return MHD_YES;
    if (cn->too_large) {
        hx_api_error e;
        hx_api_errf(&e, HX_API_ERR_TOO_LARGE, NULL, "the body is over the limit of %lld bytes (--max-body)",
                    (long long)s->o->max_body);
        return send_error(cn, dialect_for_path(url), &e, method, url);
    }
    if (cn->no_room) return refuse_no_room(cn, dialect_for_path(url), method, url, -1);
    /* the whole request is here */
    if (!strcmp(url, "/") && (!strcmp(method, "GET") || !strcmp(method, "HEAD"))) {  /* a client's reachability probe */
        static const char hello[] = "kvreplay serve\n";
        log_line(cn, method, url, 200, NULL);
        return send_bytes(cn, 200, "text/plain; charset=utf-8", hello, sizeof hello - 1);
    }
    bool other = false;
    const hx_api_route *rt = hx_api_route_find(method, url, &other);
    hx_api_error e;
    if (!rt) {
        if (other) hx_api_errf(&e, HX_API_ERR_METHOD, NULL, "%s is not allowed on %s", method, url);
        else hx_api_errf(&e, HX_API_ERR_NOT_FOUND, NULL, "File Not Found: no route %s %s", method, url);
        return send_error(cn, dialect_for_path(url), &e, method, url);
    }
    if (!authorized(s, c, url)) {
        hx_api_errf(&e, HX_API_ERR_AUTH, NULL, "Invalid API Key");
        return send_error(cn, rt->dialect, &e, method, url);
    }
    /* the body's JSON values counted: its charge made exact before it is parsed; a large body
     * then waits for a preparation lane */
    int64_t len = (int64_t)cn->body.len, n_values = hx_admit_count_values(cn->body.data ? cn->body.data : "", cn->body.len);
    if (hx_admit_estimate(&s->admit, len, n_values) > hx_admit_room(&s->admit, len > HX_ADMIT_LARGE))
        return refuse_never(cn, rt->dialect, method, url, len, n_values);
    if (!charge_to(cn, len, n_values)) return refuse_no_room(cn, rt->dialect, method, url, -1);
    bool lane = len > HX_ADMIT_LANE, trim = len > HX_ADMIT_LARGE;
    if (lane) {
        hx_admit_lane_enter(&s->admit);
        if (client_gone(socket_of(c))) {  /* it left while it waited: nobody to prepare it for */
            hx_admit_lane_leave(&s->admit, false);
            log_line(cn, method, url, 499, "the client went away");
            return MHD_NO;
        }
    }
    query_acc qa = {{0}};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_query, &qa);
    const char *query = qa.b.data ? qa.b.data : "";
    enum MHD_Result ok;
    if (rt->op == HX_API_OP_GENERATE) {
        hx_job *j = make_job(cn, rt, url, query, &e);
        if (lane) hx_admit_lane_leave(&s->admit, trim);
        if (!j) ok = send_error(cn, rt->dialect, &e, method, url);
        else {
            cn->job = j;
            atomic_fetch_add(&s->n_answering, 1);
            ok = answer_generate(cn, rt, j, method, url);
            if (cn->answered && !j->q.params.stream) {
                pthread_mutex_lock(&j->mu);
                if (j->log[0] && j->status < 400) log_line(cn, method, j->target ? j->target : url, j->status, j->log);
                pthread_mutex_unlock(&j->mu);
            }
        }
    } else {
        hx_api_req q;
        hx_api_req_init(&q);
        q.route = rt;
        bool bad = rt->parse && rt->parse(rt, url, query, cn->body.data, cn->body.len, &q, &e) != ENG_OK;
        eng_buf_free(&cn->body);
        ok = bad ? send_error(cn, rt->dialect, &e, method, url) : answer_simple(cn, rt, &q, method, url);
        hx_api_req_free(&q);
        if (lane) hx_admit_lane_leave(&s->admit, trim);
    }
    eng_buf_free(&qa.b);
    return ok;
}

/* The request is over: a generation whose client left is cancelled. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn *cn = *con_cls;
    if (!cn) return;
    if (cn->job) {
        hx_job *j = cn->job;
        pthread_mutex_lock(&j->mu);
        bool finished = j->state == JOB_DONE;
        if (j->q.params.stream && cn->answered)
            fprintf(stderr, "kvreplay serve: #%lld %s %s %s %s (%.1f ms)\n", (long long)cn->seq, j->route->method,
                    j->target ? j->target : j->route->path,
                    toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "200" : "200 (the stream was cut)",
                    j->log[0] ? j->log : "", 1e3 * (eng_now_s() - cn->t0));
        pthread_mutex_unlock(&j->mu);
        if (!finished || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_store(&j->cancelled, true);
        job_unref(j);
        atomic_fetch_sub(&cn->s->n_answering, 1);
    }
    hx_admit_release(&cn->s->admit, cn->charged);
    eng_buf_free(&cn->body);
    free(cn);
    *con_cls = NULL;
}

// ----------------------------------------------------------------------------
// Start and stop

/* "HOST:PORT" -> a socket address (IPv4 or IPv6; "[::1]:PORT" for IPv6). */
static int parse_listen(const char *spec, struct sockaddr_storage *sa, bool *loopback, char *err, size_t errlen) {
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec) {
        eng_errf(err, errlen, "--listen: expected HOST:PORT, got '%s'", spec);
        return ENG_ERR_ARG;
    }
    size_t hl = (size_t)(colon - spec);
    if (hl >= sizeof host) hl = sizeof host - 1;
    memcpy(host, spec, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535) {
        eng_errf(err, errlen, "--listen: '%s' is not a port", colon + 1);
        return ENG_ERR_ARG;
    }
    struct addrinfo hints = {.ai_flags = AI_NUMERICSERV | AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%ld", port);
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g != 0 || !ai) {
        eng_errf(err, errlen, "--listen: cannot resolve '%s': %s", host, gai_strerror(g));
        return ENG_ERR_ARG;
    }
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    if (ai->ai_family == AF_INET)
        *loopback = (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else
        *loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    freeaddrinfo(ai);
    return ENG_OK;
}

static int32_t spm_byte_token(const eng_tokenizer *tok) {
    if (eng_tokenizer_type(tok) != ENG_VOCAB_SPM) return -1;
    return eng_token_lookup(tok, "<0x41>", 6);
}

/* The model and its tokens, what /props and /v1/models say. */
static void server_info(hx_server *s) {
    const eng_model_info *mi = eng_model_get_info(hx_session_model(s->session));
    hx_api_info *in = &s->info;
    snprintf(s->build_info, sizeof s->build_info, "kvreplay %s (%s)", KVR_VERSION, hx_git_rev());
    size_t n = 0;
    const char *b = eng_tokenizer_bos(s->tok) >= 0 ? eng_token_piece(s->tok, eng_tokenizer_bos(s->tok), &n) : NULL;
    snprintf(s->bos, sizeof s->bos, "%.*s", b ? (int)n : 0, b ? b : "");
    const char *e = eng_tokenizer_eos(s->tok) >= 0 ? eng_token_piece(s->tok, eng_tokenizer_eos(s->tok), &n) : NULL;
    snprintf(s->eos, sizeof s->eos, "%.*s", e ? (int)n : 0, e ? e : "");
    const char *slash = strrchr(s->o->sp.model_path, '/');  /* llama-server: the file's name when no alias */
    in->model_name = s->o->alias ? s->o->alias : slash ? slash + 1 : s->o->sp.model_path;
    in->model_path = s->o->sp.model_path;
    in->template_name = hx_prepare_template_name(s->pc);
    in->bos_token = s->bos;
    in->eos_token = s->eos;
    in->build_info = s->build_info;
    in->vocab_type = eng_tokenizer_type_name(s->tok);
    in->n_ctx = s->n_ctx;
    in->n_vocab = mi->n_vocab;
    in->n_ctx_train = mi->n_ctx_train;
    in->n_embd = mi->n_embd;
    in->n_params = mi->n_params;
    struct stat sb;
    in->size = stat(s->o->sp.model_path, &sb) == 0 ? (int64_t)sb.st_size : 0;
    in->total_slots = s->n_slots;
    const hx_session_params *ro = &s->o->sp;
    snprintf(s->cache_json, sizeof s->cache_json, "{\"policy\":\"%s\",\"quirks\":\"%s\",\"normalize\":\"%s\","
             "\"align\":\"%s\",\"chunk\":%d,\"cap_prompt\":%s}", ro->policy, ro->quirks ? ro->quirks : "",
             ro->normalize ? ro->normalize : "", eng_align_name(ro->pp.align), ro->pp.chunk,
             ro->cap_prompt ? "true" : "false");
    in->cache_json = s->cache_json;
}

/* The run in SQLite: a serve run, one row per request (replay's schema). */
static int begin_run(hx_server *s, char *err, size_t errlen) {
    const hx_serve_opts *o = s->o;
    if (!o->db_path) return ENG_OK;
    int rc = hx_store_open(o->db_path, &s->store, err, errlen);
    if (rc) return rc;
    /* a server writes each row once and reads none back: a small page cache (sqlite's default
     * 2 MiB would be most of the memory a long run gains on a small model) */
    sqlite3_exec(hx_store_db(s->store), "PRAGMA cache_size = -256", NULL, NULL, NULL);
    hx_run_meta meta;
    static char extra[1024], source[600];
    json_t *x = json_pack("{s:s, s:b, s:s, s:s?, s:s?, s:i, s:I, s:i}", "mode", "serve", "verify", o->sp.verify, "listen",
                          o->listen, "record", o->record, "script", o->script, "n_predict", o->n_predict, "max_body",
                          (json_int_t)o->max_body, "queue", o->queue);
    char *xs = x ? hx_json_canonical(x) : NULL;
    json_decref(x);
    char more[768];  /* the session's extra, then serve's settings */
    snprintf(more, sizeof more, "\"limit\":0,\"n_resp_tokens\":\"teacher-forced\"%s%.700s", xs ? ",\"serve\":" : "",
             xs ? xs : "");
    free(xs);
    hx_session_fill_meta(s->session, s->n_ctx, o->n_ctx, -1, more, &meta, extra, sizeof extra);
    meta.transcript = o->record;
    if ((rc = hx_session_calibrate(s->session, &meta, source, sizeof source, err, errlen))) return rc;
    bool resumed = false;
    hx_done_set *done = NULL;
    rc = hx_store_begin_or_resume(s->store, &meta, false, &s->run_id, &done, &resumed, err, errlen);
    hx_done_set_free(done);
    if (rc) return rc;
    hx_session_set_store(s->session, s->store, s->run_id, o->record);
    return ENG_OK;
}

static int g_stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
    unsigned char b = (unsigned char)sig;
    int e = errno;
    if (write(g_stop_pipe[1], &b, 1) < 0) {}
    errno = e;
}

static void server_free(hx_server *s) {
    if (s->store && s->run_id > 0) {
        char err[256];
        hx_store_finish_run(s->store, s->run_id, HX_RUN_DONE, err, sizeof err);
    }
    hx_store_close(s->store);
    hx_recorder_close(s->rec);
    hx_script_close(s->script);
    hx_session_close(s->session);
    free(s->ring);
    free(s->slots);
    free(s->run);
    free(s->at);
    free(s->spans);
    free(s->span_slot);
    free(s->pre_order);
    eng_batch_free(s->batch);
    hx_metrics_destroy(&s->metrics);
    hx_admit_destroy(&s->admit);
}

int hx_serve_run(const hx_serve_opts *opts) {
    hx_serve_opts own = *opts, *o = &own;
    char err[1024] = "";
    int code = HX_EXIT_OK;
    hx_server S = {0}, *s = &S;
    s->o = o;
    hx_metrics_init(&s->metrics);
    /* long preparations on the cores the engine's threads leave (one at least); the context is set
     * once the model is open */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t lanes = (int32_t)(ncpu > 0 ? ncpu : 1) - o->sp.num.n_threads;
    hx_admit_init(&s->admit, o->max_prep, lanes, 0, o->record != NULL, o->sp.normalize && o->sp.normalize[0],
                  &s->metrics);
    pthread_mutex_init(&s->engine_mu, NULL);
    pthread_mutex_init(&s->slots_mu, NULL);
    struct MHD_Daemon *d = NULL;
    hx_session_totals sum;
    memset(&sum, 0, sizeof sum);
    struct sockaddr_storage sa;
    bool loopback = false;
    int rc = hx_session_params_check(&o->sp, err, sizeof err);
    for (int i = 0; hx_api_dialects[i]; i++) ENG_ASSERT(i < HX_METRICS_DIALECTS);  /* /metrics counts each apart */
    if (rc == ENG_OK) rc = parse_listen(o->listen, &sa, &loopback, err, sizeof err);
    if (rc == ENG_OK && !loopback && !o->api_key) {
        snprintf(err, sizeof err, "--listen %s is not a loopback address: give --api-key KEY to listen there", o->listen);
        rc = ENG_ERR_ARG;
    }
    if (rc == ENG_OK && o->sp.fault && !strcmp(o->sp.fault, "repeat-flip")) {
        snprintf(err, sizeof err, "--inject-fault repeat-flip needs --repeat, which serve does not take");
        rc = ENG_ERR_ARG;
    }
    if (rc == ENG_OK && o->sp.fault && !o->sp.verify && strcmp(o->sp.fault, "report-cached") &&
        strcmp(o->sp.fault, "batch-split-k")) {
        snprintf(err, sizeof err, "--inject-fault %s is caught by --verify: give both", o->sp.fault);
        rc = ENG_ERR_ARG;
    }
    if (rc == ENG_OK && hx_admit_estimate(&s->admit, o->max_body, 0) > hx_admit_room(&s->admit, true)) {
        snprintf(err, sizeof err, "--max-prep-memory %lld: a body of --max-body %lld bytes may take %lld bytes to be "
                 "prepared, and one request may hold 7/8 of the cap at most: raise --max-prep-memory or lower "
                 "--max-body", (long long)o->max_prep, (long long)o->max_body,
                 (long long)hx_admit_estimate(&s->admit, o->max_body, 0));
        rc = ENG_ERR_ARG;
    }
    if (rc == ENG_OK && (o->sp.repeat > 1 || o->sp.batch_check >= 0)) {
        snprintf(err, sizeof err, "%s is replay's, not serve's", o->sp.repeat > 1 ? "--repeat" : "--batch-check");
        rc = ENG_ERR_ARG;
    }
    if (rc != ENG_OK) { code = HX_EXIT_USAGE; goto fail; }

    /* llama-server's -np N gives N slots: slot-lcp's --slots follows --parallel unless given */
    int32_t given_slots = 0;
    if (rc == ENG_OK && o->parallel > 1 && !hx_policy_args_read(&o->sp.policy_args, "--slots", &given_slots))
        hx_policy_args_set_num(&o->sp.policy_args, "--slots", o->parallel);
    rc = hx_session_open(&o->sp, &sum, &s->session, err, sizeof err);
    if (rc) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    const eng_model_info *mi = eng_model_get_info(hx_session_model(s->session));
    s->tok = eng_model_tokenizer(hx_session_model(s->session));
    s->pc = hx_session_prepare(s->session);
    s->n_vocab = mi->n_vocab;
    s->n_ctx = o->n_ctx > 0 ? o->n_ctx : mi->n_ctx_train > 0 ? mi->n_ctx_train : 4096;
    s->eos_id = eng_tokenizer_eos(s->tok);
    s->eot_id = eng_tokenizer_eot(s->tok);
    s->byte_tok = spm_byte_token(s->tok);
    s->admit.n_ctx = s->n_ctx;
    if ((rc = hx_session_start(s->session, s->n_ctx, NULL, false, o->parallel, err, sizeof err))) {
        code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
        goto fail;
    }
    int32_t ns = hx_policy_n_slots(hx_session_policy(s->session));
    s->n_slots = ns > o->parallel ? ns : o->parallel;
    if (!(s->slots = calloc((size_t)s->n_slots, sizeof *s->slots))) { code = HX_EXIT_INTERNAL; goto fail; }
    for (int32_t i = 0; i < s->n_slots; i++)
        s->slots[i] = (hx_api_slot){.id = i, .n_ctx = s->n_ctx, .n_tokens = i < ns ? 0 : -1, .id_task = -1};
    server_info(s);
    if (o->script && (rc = hx_script_open(o->script, &s->script, err, sizeof err))) {
        code = hx_exit_for_input(rc);
        goto fail;
    }
    char header[512];
    char now[32];
    hx_store_utc_now(now, sizeof now);
    snprintf(header, sizeof header, "{\"format\":\"kvreplay-serve\",\"model\":\"%s\",\"started_at\":\"%s\","
             "\"template\":\"%s\",\"normalize\":\"%s\"}", mi->name, now, hx_prepare_template_name(s->pc),
             hx_prepare_normalize_names(s->pc));
    if (o->record && (rc = hx_output_check(o->record, err, sizeof err))) { code = HX_EXIT_USAGE; goto fail; }
    if ((rc = hx_recorder_open(o->record, header, &s->rec, err, sizeof err))) {
        code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
        goto fail;
    }
    if ((rc = begin_run(s, err, sizeof err))) {
        code = rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED || rc == ENG_ERR_ARG ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
        goto fail;
    }
    if (!o->db_path && !o->sp.quiet)
        fprintf(stderr, "kvreplay serve: no --db: the requests' rows are not written (metrics only)\n");

    /* the signals: a handler (any thread may take them: OpenBLAS's threads predate ours) writes
     * the signal into a pipe this thread waits on; a second one during the stop changes nothing */
    if (pipe(g_stop_pipe) != 0) { snprintf(err, sizeof err, "pipe: %s", strerror(errno)); code = HX_EXIT_INTERNAL; goto fail; }
    struct sigaction sa_stop = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa_stop.sa_mask);
    sigaction(SIGINT, &sa_stop, NULL);
    sigaction(SIGTERM, &sa_stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* a buffer of 1 MiB or more (a large body, its parse) is mapped on its own and unmapped when freed,
     * never left in an arena: glibc's default threshold rises up to 32 MiB with each such free */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    if ((rc = hx_worker_start(s, err, sizeof err))) { code = HX_EXIT_INTERNAL; goto fail; }
    d = MHD_start_daemon(MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC,
                         0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)o->max_connections, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                         MHD_OPTION_END);
    if (!d) {
        snprintf(err, sizeof err, "--listen %s: cannot listen there (%s)", o->listen,
                 errno ? strerror(errno) : "the address is in use or not this machine's");
        code = HX_EXIT_USAGE;
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = di ? di->port : 0;
    if (o->port_file) {
        char p[16];
        snprintf(p, sizeof p, "%u\n", port);
        if (eng_write_atomic(o->port_file, p, strlen(p), err, sizeof err)) { code = HX_EXIT_USAGE; goto fail; }
    }
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(strrchr(o->listen, ':') - o->listen), o->listen);
    fprintf(stderr, "kvreplay serve: listening on http://%s:%u (model %s, policy %s, %s, context %d, %s%s%s%s%s)\n",
            host, port, mi->name, o->sp.policy, hx_prepare_template_name(s->pc), s->n_ctx,
            o->sp.verify ? "verify" : "no verify", o->record ? ", record " : "", o->record ? o->record : "",
            o->script ? ", script " : "", o->script ? o->script : "");

    unsigned char sig = 0;
    while (read(g_stop_pipe[0], &sig, 1) < 0 && errno == EINTR) {}
    fprintf(stderr, "kvreplay serve: %s: finishing the request in progress, then stopping\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_quiesce_daemon(d);
    hx_worker_stop(s);
    /* the answers already computed are sent to the end before the connections close */
    for (double t0 = eng_now_s(); atomic_load(&s->n_answering) > 0 && eng_now_s() - t0 < 30;) usleep(10000);
    MHD_stop_daemon(d);
    d = NULL;
    fprintf(stderr, "kvreplay serve: stopped: %d requests through the engine, reuse %.1f%% of prompt tokens, "
            "%d diverged%s%s\n", sum.n_requests,
            sum.n_prompt ? 100.0 * (double)sum.n_reused / (double)sum.n_prompt : 0.0, sum.n_diverged,
            o->db_path ? " -> " : "", o->db_path ? o->db_path : "");
    goto out;
fail:
    fprintf(stderr, "kvreplay serve: %s\n", err[0] ? err : "failed");
    if (s->store && s->run_id > 0) hx_store_finish_run(s->store, s->run_id, HX_RUN_FAILED, NULL, 0), s->run_id = 0;
out:
    if (d) MHD_stop_daemon(d);
    hx_worker_stop(s);
    server_free(s);
    return code;
}
