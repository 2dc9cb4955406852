/*
 * harness/serve/job.c: a request in flight (serve_int.h) and its way through
 * the engine as the worker's scheduler drives it (worker.c): begin (the
 * generation set up, the session turn begun), the session's callbacks as
 * the steps run (the status and headers once the prompt is done, each
 * generated token's text and probabilities, streamed as it comes, stop
 * strings held back), finish (the turn ended, the result, the counters,
 * the record, the answer) or fail.
 *
 * Generation: greedy (argmax, lowest id on ties) until EOS or end of turn,
 * a stop string, max_tokens (capped by -n), or the context. A token's text is
 * its bytes as they appear in generated text; the turn's text is their
 * concatenation with every byte that is not valid UTF-8 written as U+FFFD.
 * Probabilities (n_probs, logprobs): log-softmax of the raw logits, in
 * double, the top n by logit (lowest id first on ties).
 *
 * A request whose client goes away while it runs stops at the next step (a
 * chunk of its prompt, or a token), and the cache keeps what it computed
 * (the prompt so far, or the prompt and the tokens generated so far), as
 * llama-server's slot does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "serve_int.h"
#include "status.h"
#include "str.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Jobs

hx_job *job_new(void) {
    hx_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->refs, 1);
    hx_api_req_init(&j->q);
    hx_api_result_init(&j->res);
    j->received.response.role = HX_ROLE_ASSISTANT;
    atomic_init(&j->cancelled, false);
    return j;
}

void job_ref(hx_job *j) { atomic_fetch_add(&j->refs, 1); }

void job_unref(hx_job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) > 1) return;
    hx_api_req_free(&j->q);
    hx_request_free(&j->received);
    hx_prepared_free(&j->p);
    hx_api_result_free(&j->res);
    hx_api_stream_free(&j->stream);
    eng_buf_free(&j->out);
    free(j->body);
    free(j->key);
    free(j->target);
    free(j->headers);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Finishes j with an error (before or after its stream began). Called with j->mu held. */
void job_fail_locked(hx_job *j, const hx_api_error *e) {
    j->err = *e;
    if (j->state >= JOB_HEADERS && j->q.params.stream && j->stream.route) {
        hx_api_stream_error(&j->stream, e);
        eng_buf_append(&j->out, j->stream.out.data ? j->stream.out.data : "", j->stream.out.len);
        j->stream.out.len = 0;
    } else {
        j->status = e->status;
    }
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
}

// ----------------------------------------------------------------------------
// Token text and probabilities

int64_t hx_token_bytes(const hx_server *s, int32_t id, char *buf, size_t cap) {
    int32_t ids[2] = {s->byte_tok, id};
    char tmp[512];
    if (s->byte_tok >= 0) {  /* a byte token first: SPM does not strip the dummy-prefix space after it */
        int64_t n = eng_detokenize(s->tok, ids, 2, false, tmp, sizeof tmp);
        if (n < 1 || (size_t)n > sizeof tmp || (size_t)(n - 1) > cap) return -1;
        memcpy(buf, tmp + 1, (size_t)(n - 1));
        return n - 1;
    }
    int64_t n = eng_detokenize(s->tok, &id, 1, false, buf, cap);
    return n < 0 || (size_t)n > cap ? -1 : n;
}

typedef struct cand { int32_t id; float logit; } cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Fills t's logprob and its k most probable candidates (t->top, malloc'd texts). */
static int token_probs(const hx_server *s, const float *logits, int32_t k, hx_api_token *t) {
    int32_t V = s->n_vocab;
    double mx = logits[0];
    for (int32_t i = 1; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    double logz = mx + log(sum);
    t->logprob = (float)((double)logits[t->id] - logz);
    if (k <= 0) return ENG_OK;
    if (k > V) k = V;
    cand *c = malloc(sizeof *c * (size_t)(k <= 64 ? k + 1 : V));
    if (!c) return ENG_ERR_NOMEM;
    int32_t n = 0;
    if (k <= 64) {  /* insertion into a sorted array of k */
        for (int32_t i = 0; i < V; i++) {
            cand x = {i, logits[i]};
            if (n == k && cand_cmp(&x, &c[n - 1]) >= 0) continue;
            int32_t p = n < k ? n++ : k - 1;
            while (p > 0 && cand_cmp(&x, &c[p - 1]) < 0) { c[p] = c[p - 1]; p--; }
            c[p] = x;
        }
    } else {
        for (int32_t i = 0; i < V; i++) c[i] = (cand){i, logits[i]};
        qsort(c, (size_t)V, sizeof *c, cand_cmp);
        n = k;
    }
    t->top = calloc((size_t)n, sizeof *t->top);
    if (!t->top) { free(c); return ENG_ERR_NOMEM; }
    char buf[512];
    for (int32_t i = 0; i < n; i++, t->n_top++) {
        int64_t len = hx_token_bytes(s, c[i].id, buf, sizeof buf);
        if (len < 0) len = 0;
        t->top[i].id = c[i].id;
        t->top[i].logprob = (float)((double)c[i].logit - logz);
        t->top[i].len = (size_t)len;
        if (!(t->top[i].text = malloc((size_t)len + 1))) { free(c); return ENG_ERR_NOMEM; }
        memcpy(t->top[i].text, buf, (size_t)len);
        t->top[i].text[len] = '\0';
    }
    free(c);
    return ENG_OK;
}

static void token_free_tops(hx_api_token *t) {
    for (int32_t i = 0; i < t->n_top; i++) free(t->top[i].text);
    free(t->top);
    t->top = NULL;
    t->n_top = 0;
}

// ----------------------------------------------------------------------------
// The generation: the session's callbacks

/* Moves the stream's new bytes to the job's outgoing buffer (j->mu held). */
static void flush_stream_locked(hx_job *j) {
    if (j->stream.out.len) {
        eng_buf_append(&j->out, j->stream.out.data, j->stream.out.len);
        j->stream.out.len = 0;
    }
    pthread_cond_broadcast(&j->cv);
}

static void set_usage(hx_gen *g, const hx_turn_status *st) {
    hx_api_result *r = &g->j->res;
    /* --inject-fault report-cached (a planted fault, for kvreplay probe): one more than was reused */
    const char *fault = g->s->o->sp.fault;
    int64_t said = st->n_reused + (fault && !strcmp(fault, "report-cached") && st->n_reused > 0);
    r->usage.prompt_tokens = st->n_prompt;
    r->usage.cached_tokens = said;
    r->usage.cache_creation_tokens = 0;
    r->usage.completion_tokens = 0;
    r->timings.cache_n = said;
    r->timings.prompt_n = st->n_prompt - said;
    r->timings.prompt_ms = st->ttft_ms;
    r->timings.predicted_n = 0;
    r->id_slot = st->acq && st->acq->slot >= 0 ? st->acq->slot : 0;
}

static int on_prompt(void *ud, const hx_turn_status *st) {
    hx_gen *g = ud;
    hx_job *j = g->j;
    g->t_prompt = eng_now_s();
    hx_metrics_ttft(&g->s->metrics, g->t_prompt - j->t_received);
    pthread_mutex_lock(&j->mu);
    set_usage(g, st);
    j->res.info = &g->s->info;  /* the model name responses echo */
    j->res.created = (int64_t)time(NULL);
    if (!j->res.id) {
        char id[64];
        hx_api_make_id(id, sizeof id, j->route->dialect->id_prefix ? j->route->dialect->id_prefix
                                      : j->route->dialect == hx_api_dialect_find("anthropic") ? "msg_"
                                      : strstr(j->route->path, "chat") ? "chatcmpl-" : "cmpl-", (uint64_t)j->seq);
        j->res.id = hx_strdup(id);
    }
    snprintf(j->h_reused, sizeof j->h_reused, "%d", st->n_reused);
    snprintf(j->h_prompt, sizeof j->h_prompt, "%d", st->n_prompt);
    snprintf(j->h_identical, sizeof j->h_identical, "%s",
             !st->compared ? "unverified" : st->logits_equal && st->state_equal != 0 ? "true" : "false");
    j->status = 200;
    if (j->q.params.stream) {
        hx_api_stream_init(&j->stream, &j->q, &j->res);
        hx_api_stream_begin(&j->stream);
        if (g->scripted)  /* the scripted turn goes out at once; the engine still decodes the compared steps */
            for (int32_t b = 0; b < g->scripted->response.n_blocks; b++)
                hx_api_stream_block(&j->stream, &g->scripted->response.blocks[b]);
        flush_stream_locked(j);
    }
    j->state = JOB_HEADERS;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return atomic_load(&j->cancelled) ? HX_TURN_CANCEL : HX_TURN_GO;
}

/* The first stop string in text at or after from, SIZE_MAX when none. */
static size_t find_stop(const hx_api_params *p, const char *text, size_t n) {
    size_t best = SIZE_MAX;
    for (int32_t i = 0; i < p->n_stop; i++) {
        const char *at = memmem(text, n, p->stop[i], strlen(p->stop[i]));
        if (at && (size_t)(at - text) < best) best = (size_t)(at - text);
    }
    return best;
}

static int on_token(void *ud, int32_t k, int32_t id, const float *logits) {
    hx_gen *g = ud;
    hx_server *s = g->s;
    hx_job *j = g->j;
    const hx_api_params *p = &j->q.params;
    if (atomic_load(&j->cancelled)) return HX_TURN_CANCEL;
    if (id == s->eos_id || id == s->eot_id) {  /* the end of the turn: not part of the text */
        g->finish = HX_API_FINISH_STOP;
        g->stopped = true;
        return HX_TURN_STOP;
    }
    char bytes[512];
    int64_t len = hx_token_bytes(s, id, bytes, sizeof bytes);
    if (len < 0) len = 0;
    hx_api_token t = {.id = id, .text = bytes, .len = (size_t)len, .logprob = NAN};
    if ((p->logprobs || p->n_probs > 0) && token_probs(s, logits, p->n_probs, &t) != ENG_OK) {
        token_free_tops(&t);
        return HX_TURN_CANCEL;
    }
    eng_buf_append(&g->text, bytes, (size_t)len);
    g->stop_at = p->n_stop ? find_stop(p, g->text.data, g->text.len) : SIZE_MAX;
    size_t end = g->stop_at != SIZE_MAX ? g->stop_at : g->text.len > g->hold ? g->text.len - g->hold : 0;
    if (end < g->released) end = g->released;
    pthread_mutex_lock(&j->mu);
    hx_api_result_push_token(&j->res, &t);
    j->res.usage.completion_tokens = k + 1;
    if (p->stream) {  /* the token event carries the text released now (stop strings held back) */
        hx_api_token out = t;
        out.text = g->text.data + g->released;
        out.len = end - g->released;
        hx_api_stream_token(&j->stream, &out);
        g->released = end;
        flush_stream_locked(j);
    }
    pthread_mutex_unlock(&j->mu);
    token_free_tops(&t);
    if (g->stop_at != SIZE_MAX) {
        g->finish = HX_API_FINISH_STOP_WORD;
        g->stopped = true;
        return HX_TURN_STOP;
    }
    /* max_tokens reached: "length"; serve's own -n cap or the context's end: the end of the turn (an agent
     * takes the turn as the model's answer instead of asking it to go on: docs/serve.md) */
    if (k + 1 >= g->max_gen) g->finish = g->client_limit ? HX_API_FINISH_LENGTH : HX_API_FINISH_STOP;
    return HX_TURN_GO;
}

/* The generated turn: its text (to the stop string), as the request's response. */
static int on_response(void *ud, hx_request *req) {
    hx_gen *g = ud;
    hx_job *j = g->j;
    size_t n = g->stop_at != SIZE_MAX ? g->stop_at : g->text.len;
    char *text = hx_api_utf8_sanitize(g->text.data ? g->text.data : "", n, NULL);
    if (!text) return ENG_ERR_NOMEM;
    int rc = ENG_OK;
    for (int pass = 0; pass < 2 && !rc; pass++) {  /* the engine's request, and the one recorded as received */
        hx_request *q = pass ? &j->received : req;
        hx_message_free(&q->response);
        q->response.role = HX_ROLE_ASSISTANT;
        free(q->response_text);
        q->response_text = NULL;
        if (hx_request_kind_of(q) != HX_REQUEST_MESSAGES) {
            if (!(q->response_text = hx_strdup(text))) rc = ENG_ERR_NOMEM;
        } else if (text[0]) {
            hx_block b;
            if (hx_block_init(&b, HX_BLOCK_TEXT, text, NULL, NULL, NULL, false) || hx_message_push_block(&q->response, &b))
                rc = ENG_ERR_NOMEM;
        }
    }
    pthread_mutex_lock(&j->mu);
    hx_message_free(&j->res.content);
    j->res.content.role = HX_ROLE_ASSISTANT;
    hx_block b;
    if (!rc && text[0] &&
        (hx_block_init(&b, HX_BLOCK_TEXT, text, NULL, NULL, NULL, false) || hx_message_push_block(&j->res.content, &b)))
        rc = ENG_ERR_NOMEM;
    if (j->q.params.stream && g->released < n) {  /* the held-back text before the stop string */
        hx_api_token rest = {.id = -1, .text = g->text.data + g->released, .len = n - g->released, .logprob = NAN};
        hx_api_stream_token(&j->stream, &rest);
        g->released = n;
        flush_stream_locked(j);
    }
    pthread_mutex_unlock(&j->mu);
    free(text);
    return rc;
}

// ----------------------------------------------------------------------------
// The request's record and log

/* The `served` object of the record: how the request came. */
static char *served_json(const hx_job *j, const char *sampling, bool scripted, int32_t script_index) {
    json_t *o = json_object();
    json_error_t je;
    if (!o) return NULL;
    json_object_set_new(o, "api", json_string(j->route->dialect->name));
    json_object_set_new(o, "method", json_string(j->route->method));
    json_object_set_new(o, "target", json_string(j->target ? j->target : j->route->path));
    json_t *h = j->headers ? json_loads(j->headers, 0, &je) : NULL;
    json_object_set_new(o, "headers", h ? h : json_object());
    json_object_set_new(o, "body", json_stringn(j->body ? j->body : "", j->body_len));
    json_object_set_new(o, "stream", json_boolean(j->q.params.stream));
    if (j->q.params.id_slot >= 0) json_object_set_new(o, "id_slot", json_integer(j->q.params.id_slot));
    if (!j->q.params.cache_prompt) json_object_set_new(o, "cache_prompt", json_false());
    if (sampling[0]) json_object_set_new(o, "sampling_not_honoured", json_string(sampling));
    if (j->q.params.ignored) json_object_set_new(o, "ignored_fields", json_string(j->q.params.ignored));
    if (scripted) json_object_set_new(o, "script_turn", json_integer(script_index));
    char *s = hx_json_canonical(o);
    json_decref(o);
    return s;
}

static const char *verdict(const hx_turn_result *r) {
    return !r->compared ? "unverified" : r->identical ? "identical" : "DIVERGED";
}

/* Says a divergence on stderr at once, with what differs. */
static void say_divergence(hx_server *s, const hx_job *j, const hx_turn_result *r) {
    const hx_request *q = &j->q.req;
    char what[320];
    if (!r->logits_equal)
        snprintf(what, sizeof what, "the prompt's last logits differ at index %lld: cold %a, reused %a (ULP %llu)",
                 (long long)r->cmp.first_diff, (double)r->cmp.a_first, (double)r->cmp.b_first,
                 (unsigned long long)r->cmp.ulp_first);
    else if (r->state_equal == 0)
        snprintf(what, sizeof what, "the logits are identical, the state after the prompt is not");
    else
        snprintf(what, sizeof what, "decode step %d differs%s", r->first_step_diff,
                 r->fork_step >= 0 ? " (the greedy tokens fork)" : "");
    fprintf(stderr, "kvreplay serve: DIVERGED: request %lld (session %s turn %d, %d of %d prompt tokens reused): %s\n",
            (long long)j->seq, q->session, q->turn, r->n_reused, r->n_prompt, what);
    atomic_store(&s->said_diverged, true);
}

/* The result the client gets, and the counters. */
static void finish_result(hx_server *s, hx_job *j, const hx_gen *g, const hx_notes *sn, const hx_turn_result *r) {
    pthread_mutex_lock(&j->mu);
    hx_api_result *res = &j->res;
    if (sn->scripted) {
        hx_message_free(&res->content);
        hx_message_copy(&res->content, &sn->scripted->response);
        res->content.role = HX_ROLE_ASSISTANT;
        res->finish = HX_API_FINISH_STOP;
        for (int32_t b = 0; b < res->content.n_blocks; b++)
            if (res->content.blocks[b].type == HX_BLOCK_TOOL_USE) res->finish = HX_API_FINISH_TOOL_USE;
        res->usage.completion_tokens = j->p.n_resp;
    } else {
        res->finish = g->finish;
        res->usage.completion_tokens = r->n_generated;
    }
    res->timings.predicted_n = res->usage.completion_tokens;
    res->timings.predicted_ms = r->decode_ms;
    snprintf(j->h_identical, sizeof j->h_identical, "%s", !r->compared ? "unverified" : r->identical ? "true" : "false");
    pthread_mutex_unlock(&j->mu);

    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.prompt_tokens += r->n_prompt;
    s->metrics.reused_tokens += r->n_reused;
    s->metrics.generated_tokens += sn->scripted ? 0 : r->n_generated;
    if (r->compared) {
        s->metrics.verified++;
        if (r->identical) s->metrics.identical++;
        else s->metrics.diverged++;
    }
    if (r->cancelled) s->metrics.cancelled++;
    pthread_mutex_unlock(&s->metrics.mu);
    if (r->compared && !r->identical) say_divergence(s, j, r);
}

/* The record: the request as received, with its turn, usage, how it came and what serve noted. */
static int record_request(hx_server *s, hx_job *j, const hx_notes *sn, const hx_turn_result *r) {
    const hx_api_req *q = &j->q;
    json_t *notes = json_array();
    char line[640];
    if (j->sampling[0]) {
        snprintf(line, sizeof line, "sampling not honoured (greedy decoding): %s", j->sampling);
        json_array_append_new(notes, json_string(line));
    }
    if (q->params.ignored) {
        snprintf(line, sizeof line, "fields accepted, not acted on: %.500s", q->params.ignored);
        json_array_append_new(notes, json_string(line));
    }
    if (q->n_unknown_blocks) {
        snprintf(line, sizeof line, "%lld content blocks of unknown types kept as their JSON text (%s)",
                 (long long)q->n_unknown_blocks, q->unknown_types);
        json_array_append_new(notes, json_string(line));
    }
    if (sn->script_note) json_array_append_new(notes, json_string(sn->script_note));
    if (sn->departure[0]) {
        snprintf(line, sizeof line, "departs from the script: %.560s", sn->departure);
        json_array_append_new(notes, json_string(line));
    }
    if (r->cancelled) json_array_append_new(notes, json_string("cancelled: the client went away"));
    free(j->received.notes);
    j->received.notes = notes && json_array_size(notes) ? hx_json_canonical(notes) : NULL;
    json_decref(notes);
    if (!(j->received.served = served_json(j, j->sampling, sn->scripted != NULL, sn->script_index)))
        return ENG_ERR_NOMEM;
    j->received.usage = (hx_call_usage){.present = true, .input = r->n_prompt - r->n_reused,
                                        .cache_read = r->n_reused, .prompt_tokens = -1};
    char err[1024];
    if (hx_recorder_add(s->rec, &j->received, err, sizeof err))
        fprintf(stderr, "kvreplay serve: --record: %s\n", err);  /* the request was served: said, not failed */
    return ENG_OK;
}

/* The answer: the stream's end, or the whole body; the request's log line. */
static void answer(hx_job *j, const hx_gen *g, const hx_notes *sn, const hx_turn_result *r) {
    hx_api_req *q = &j->q;
    pthread_mutex_lock(&j->mu);
    if (q->params.stream) {
        if (j->stream.route) {
            if (!j->route->dialect->sse_data_only)
                eng_buf_printf(&j->stream.out, ": kvreplay reused=%d prompt=%d identical=%s%s\n\n", r->n_reused,
                               r->n_prompt, !r->compared ? "unverified" : r->identical ? "true" : "false",
                               r->compared ? " (logits, decode steps, state)" : "");
            hx_api_stream_end(&j->stream);
            flush_stream_locked(j);
        }
    }  /* a whole body is rendered by the connection thread (serve.c) from j->res */
    snprintf(j->log, sizeof j->log, "%s turn %d: prompt %d reused %d ttft %.1f ms, %s %d tok in %.0f ms, %s%s%s%s",
             q->req.session, q->req.turn, r->n_prompt, r->n_reused, r->ttft_ms, sn->scripted ? "scripted" : "generated",
             sn->scripted ? j->p.n_resp : r->n_generated, r->decode_ms, verdict(r), r->cancelled ? ", cancelled" : "",
             j->sampling[0] ? ", sampling not honoured: " : "", j->sampling);
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

// ----------------------------------------------------------------------------
// Begin, finish, fail

void job_fail(hx_job *j, const hx_api_error *e) {
    pthread_mutex_lock(&j->mu);
    job_fail_locked(j, e);
    snprintf(j->log, sizeof j->log, "%.480s", e->message);
    pthread_mutex_unlock(&j->mu);
}

/* The error of a turn that failed (rc, err), for the client; said on stderr. */
static void turn_failed(hx_server *s, hx_slot *sl, int rc, const char *err) {
    hx_job *j = sl->j;
    hx_api_error e;
    if (rc == ENG_ERR_RANGE && sl->sn.scripted && !sl->run) {  /* the scripted turn does not fit: nothing ran */
        hx_api_errf(&e, HX_API_ERR_CONTEXT, NULL, "%s", err);
        e.n_prompt_tokens = j->p.n + j->p.n_resp;
        e.n_ctx = s->n_ctx;
    } else {
        if (rc == ENG_ERR_NOMEM) hx_api_errf(&e, HX_API_ERR_SERVER, NULL, "out of memory");
        else hx_api_errf(&e, HX_API_ERR_SERVER, NULL, "%s", err[0] ? err : eng_status_str(rc));
        fprintf(stderr, "kvreplay serve: request %lld failed: %s\n", (long long)j->seq, e.message);
    }
    job_fail(j, &e);
    eng_buf_free(&sl->g.text);
}

int job_begin(hx_server *s, hx_slot *sl, int32_t idx) {
    const hx_serve_opts *o = s->o;
    hx_job *j = sl->j;
    hx_api_req *q = &j->q;
    hx_gen *g = &sl->g;
    const hx_notes *sn = &sl->sn;
    *g = (hx_gen){.s = s, .j = j, .scripted = sn->scripted, .stop_at = SIZE_MAX, .finish = HX_API_FINISH_LENGTH};
    for (int32_t i = 0; i < q->params.n_stop; i++)
        if (strlen(q->params.stop[i]) > g->hold) g->hold = strlen(q->params.stop[i]);
    if (g->hold) g->hold--;
    int32_t cap = o->n_predict > 0 ? o->n_predict : INT32_MAX;
    if (q->params.max_tokens >= 0 && q->params.max_tokens <= cap) cap = q->params.max_tokens, g->client_limit = true;
    int32_t room = s->n_ctx - j->p.n - 1;
    if (room < cap) g->client_limit = false;
    g->max_gen = sn->scripted ? 0 : cap < room ? cap : room;
    if (g->max_gen < 0) g->max_gen = 0;
    sl->gen = (hx_turn_gen){.max_tokens = g->max_gen, .on_prompt = on_prompt, .on_token = on_token,
                            .on_response = sn->scripted ? NULL : on_response, .ud = g};
    /* the row is replay's row for the same request (what only serve knows goes to the record) */
    hx_turn t = {.idx = idx, .req = &q->req, .p = &j->p, .new_response = sn->scripted != NULL,
                 .hint = {.id_slot = q->params.id_slot, .no_reuse = !q->params.cache_prompt}, .gen = &sl->gen};
    char err[1024] = "";
    sl->run = NULL;
    int rc = hx_turn_begin(s->session, &t, &sl->run, err, sizeof err);
    if (rc) turn_failed(s, sl, rc, err);
    return rc;
}

void job_abort(hx_server *s, hx_slot *sl, int rc, const char *err) {
    hx_turn_abort(sl->run);
    sl->run = NULL;
    turn_failed(s, sl, rc, err);
}

void job_finish(hx_server *s, hx_slot *sl) {
    hx_job *j = sl->j;
    char err[1024] = "";
    hx_turn_result *r = &sl->r;
    int rc = hx_turn_end(sl->run, r, err, sizeof err);
    sl->run = NULL;
    if (rc) {
        turn_failed(s, sl, rc, err);
        return;
    }
    finish_result(s, j, &sl->g, &sl->sn, r);
    if (record_request(s, j, &sl->sn, r)) {
        hx_api_error e;
        hx_api_errf(&e, HX_API_ERR_SERVER, NULL, "out of memory");
        job_fail(j, &e);
    } else {
        answer(j, &sl->g, &sl->sn, r);
    }
    eng_buf_free(&sl->g.text);
}
