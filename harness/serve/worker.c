/*
 * harness/serve/worker.c: the bounded queue and the engine worker of
 * `kvreplay serve`: a scheduler with continuous batching over --parallel N
 * slots (llama-server's -np N), in one thread that owns the model.
 *
 * Each iteration of the scheduler:
 *   1. slots whose client went away are cancelled (their turn ends at this
 *      chunk boundary, mid-prefill included: the cache keeps what is valid);
 *      slots whose turn needs no more steps are finished (job.c: the row,
 *      the record, the answer);
 *   2. queued requests are admitted into idle slots, in queue order (one
 *      that names a busy slot with id_slot waits, the next is admitted):
 *      their session and turn assigned (the record's session key), the
 *      script matched, the session turn begun (the policy's acquire); they
 *      join this step;
 *   3. the step: one span per busy slot, every decode token first, then the
 *      prefill chunks (each on its own sequence's absolute grid, C = 64),
 *      within --batch-size rows when one is set (a prefill chunk that does
 *      not fit waits for a later step; a span is never cut off its grid;
 *      the first span always runs), stacked into one eng_batch_forward;
 *   4. after the step, each turn takes its span's result (the policy's
 *      on_chunk, the first token's time, the generated token, streamed).
 * Under --kernel ref a request's bits do not depend on what shares its
 * steps (batch invariance, tests/test_batch.c) and its chunks are its own
 * grid cells, so its reply is the one --parallel 1 gives.
 *
 * A slot is a sequence in flight: slot-lcp's slots are the policy's (the
 * request goes to the slot the policy picks, or the one id_slot names);
 * the other policies' slots are lanes over their shared cache. The queue
 * holds at most --queue requests waiting for a slot; beyond it a request is
 * refused with 503 and Retry-After (serve.c). A request whose client went
 * away before it ran is dropped unrun.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normalize.h"
#include "serve_int.h"
#include "status.h"
#include "str.h"
#include "util.h"

// ----------------------------------------------------------------------------
// The queue

bool hx_worker_submit(hx_server *s, hx_job *j) {
    pthread_mutex_lock(&s->q_mu);
    bool ok = !s->stopping && s->q_len < s->q_cap;
    if (ok) {
        job_ref(j);
        s->ring[(s->q_head + s->q_len) % s->q_cap] = j;
        s->q_len++;
        pthread_cond_signal(&s->q_cv);
    }
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.queue_depth = s->q_len;
    if (!ok && !s->stopping) s->metrics.refused_queue_full++;
    pthread_mutex_unlock(&s->metrics.mu);
    pthread_mutex_unlock(&s->q_mu);
    return ok;
}

/* Whether j can take a slot now: fewer than --parallel are busy, and the one its id_slot names is idle. */
static bool admissible(const hx_server *s, const hx_job *j) {
    int32_t want = j->q.params.id_slot;
    return s->n_busy < s->n_run && (want < 0 || (want < s->n_slots && !s->at[want]));
}

/* The first queued job that can take a slot now (removed from the queue), or NULL. q_mu held. */
static hx_job *pop_admissible_locked(hx_server *s) {
    for (int32_t k = 0; k < s->q_len; k++) {
        hx_job *j = s->ring[(s->q_head + k) % s->q_cap];
        if (!atomic_load(&j->cancelled) && !admissible(s, j)) continue;  /* a cancelled one is dropped at once */
        for (int32_t m = k; m > 0; m--)  /* close the gap: the ones before it keep their order */
            s->ring[(s->q_head + m) % s->q_cap] = s->ring[(s->q_head + m - 1) % s->q_cap];
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.queue_depth = s->q_len;
        pthread_mutex_unlock(&s->metrics.mu);
        return j;
    }
    return NULL;
}

// ----------------------------------------------------------------------------
// Session identity: which conversation a request continues

static int identity_add(hx_server *s, const char *key, const char *name, int32_t next_turn) {
    char **nm = realloc(s->id_names, sizeof *nm * (size_t)(s->n_ids + 1));
    if (nm) s->id_names = nm;
    int32_t *nt = realloc(s->id_next_turn, sizeof *nt * (size_t)(s->n_ids + 1));
    if (nt) s->id_next_turn = nt;
    if (!nm || !nt || !(s->id_names[s->n_ids] = hx_strdup(name))) return ENG_ERR_NOMEM;
    s->id_next_turn[s->n_ids] = next_turn;
    if (hx_strmap_put(&s->id_keys, key, s->n_ids)) return ENG_ERR_NOMEM;
    s->n_ids++;
    return ENG_OK;
}

/* The sessions a --record file already holds continue: their names and next turns. */
static int identity_seed(hx_server *s) {
    for (int32_t k = 0; k < hx_recorder_n_sessions(s->rec); k++) {
        const hx_request *last = hx_recorder_last(s->rec, k);
        char *key = hx_serve_session_key(last);
        int rc = key ? identity_add(s, key, last->session, last->turn + 1) : ENG_ERR_NOMEM;
        free(key);
        if (rc) return rc;
    }
    return ENG_OK;
}

static void identity_free(hx_server *s) {
    for (int32_t i = 0; i < s->n_ids; i++) free(s->id_names[i]);
    free(s->id_names);
    free(s->id_next_turn);
    hx_strmap_free(&s->id_keys);
    s->id_names = NULL;
    s->id_next_turn = NULL;
    s->n_ids = 0;
}

/* The session and turn of j: "serve-K" (the first K no session has) and its next turn; raw
 * requests are "serve-raw". Set on the engine's request and on the one recorded as received. */
static int identity_assign(hx_server *s, hx_job *j) {
    const char *key = j->key;
    int64_t k;
    int rc = ENG_OK;
    if (!hx_strmap_get(&s->id_keys, key, &k)) {
        char name[48];
        if (key[0] == '\x1f') snprintf(name, sizeof name, "serve-raw");  /* the raw requests' key */
        else
            for (int32_t n = 0, taken = 1; taken; n++) {
                snprintf(name, sizeof name, "serve-%d", n);
                taken = 0;
                for (int32_t i = 0; i < s->n_ids; i++) taken |= !strcmp(s->id_names[i], name);
            }
        k = s->n_ids;
        rc = identity_add(s, key, name, 0);
    }
    if (rc) return rc;
    hx_request *both[2] = {&j->q.req, &j->received};
    for (int i = 0; i < 2; i++) {
        free(both[i]->session);
        if (!(both[i]->session = hx_strdup(s->id_names[k]))) return ENG_ERR_NOMEM;
        both[i]->turn = s->id_next_turn[k];
    }
    s->id_next_turn[k]++;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The script

/* The script's turn for j, if any: its response becomes the request's (the turn renders it). */
static int match_script(hx_server *s, hx_job *j, hx_notes *sn, hx_api_error *e) {
    sn->script_index = -1;
    if (!s->script) return ENG_OK;
    bool exhausted = false;
    hx_script_next(s->script, &j->received, &sn->scripted, &sn->script_index, &exhausted, sn->departure,
                   sizeof sn->departure);
    pthread_mutex_lock(&s->metrics.mu);
    if (sn->scripted) s->metrics.scripted++;
    else s->metrics.side_requests++;
    if (sn->departure[0]) s->metrics.departures++;
    pthread_mutex_unlock(&s->metrics.mu);
    if (!sn->scripted) {
        sn->script_note = exhausted ? "the script is played out: answered by the model"
                                    : "a side request (not the scripted conversation): answered by the model";
        snprintf(j->h_script, sizeof j->h_script, "%s", exhausted ? "played out" : "side request");
        static bool said_exhausted;
        if (exhausted && !said_exhausted) {
            said_exhausted = true;
            fprintf(stderr, "kvreplay serve: the script's %d turns are played out: the model answers from now on\n",
                    hx_script_length(s->script));
        }
        return ENG_OK;
    }
    hx_message_free(&j->q.req.response);
    hx_message_free(&j->received.response);
    if (hx_message_copy(&j->q.req.response, &sn->scripted->response) ||
        hx_message_copy(&j->received.response, &sn->scripted->response))
        return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    j->q.req.response.role = j->received.response.role = HX_ROLE_ASSISTANT;
    snprintf(j->h_script, sizeof j->h_script, "turn %d of %d%s%.560s", sn->script_index, hx_script_length(s->script),
             sn->departure[0] ? "; departs: " : "", sn->departure);
    if (sn->departure[0])
        fprintf(stderr, "kvreplay serve: request %lld departs from the script (turn %d): %s\n", (long long)j->seq,
                sn->script_index, sn->departure);
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The slots, as /slots shows them

/* What /slots reports: per slot the tokens it holds (slot-lcp: the policy's slot; the others: the
 * request in flight's sequence, -1 when idle), whether it is at work, the last request it took. */
static void update_slots(hx_server *s) {
    hx_policy *pol = hx_session_policy(s->session);
    const int32_t n_pol = hx_policy_n_slots(pol);
    pthread_mutex_lock(&s->slots_mu);
    for (int32_t i = 0; i < s->n_slots; i++) {
        const hx_slot *sl = s->at[i];
        s->slots[i].is_processing = sl != NULL;
        s->slots[i].n_tokens = i < n_pol ? hx_policy_slot_tokens(pol, i) : sl && sl->run ? hx_turn_n_tokens(sl->run) : -1;
        if (sl) s->slots[i].id_task = sl->j->seq;
    }
    pthread_mutex_unlock(&s->slots_mu);
}

// ----------------------------------------------------------------------------
// The scheduler

/* The slot is free again (its job answered). */
static void release_slot(hx_server *s, hx_slot *sl) {
    if (sl->index >= 0) {
        s->at[sl->index] = NULL;
        s->n_busy--;
    }
    job_unref(sl->j);
    memset(sl, 0, sizeof *sl);
    sl->index = -1;
}

/* A job whose client left while it waited: nothing to compute, it is done. */
static void drop_unrun(hx_server *s, hx_job *j) {
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.cancelled++;
    pthread_mutex_unlock(&s->metrics.mu);
    pthread_mutex_lock(&j->mu);
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
}

/* Takes j into a free record sl: its session and turn, the script's part, the session turn begun (the
 * policy's acquire); then into its slot: the policy's (slot-lcp), the one id_slot names, else the first
 * idle one. It joins the next step. ENG_OK, or the job failed (answered) and sl holds no turn. */
static int admit(hx_server *s, hx_slot *sl, hx_job *j) {
    hx_api_error e;
    *sl = (hx_slot){.j = j, .sn = {.script_index = -1}, .index = -1};
    int rc = identity_assign(s, j) ? hx_api_errf(&e, HX_API_ERR_SERVER, NULL, "out of memory")
                                   : match_script(s, j, &sl->sn, &e);
    if (rc) {
        job_fail(j, &e);
        return rc;
    }
    if ((rc = job_begin(s, sl, (int32_t)s->n_engine++)) != ENG_OK) return rc;
    int32_t i = hx_turn_slot(sl->run) >= 0 ? hx_turn_slot(sl->run) : j->q.params.id_slot;
    if (i < 0)
        for (i = 0; s->at[i]; i++) {}
    ENG_ASSERT(i < s->n_slots && !s->at[i]);
    sl->index = i;
    s->at[i] = sl;
    s->n_busy++;
    return ENG_OK;
}

/* The busy slots reading their prompt, oldest request first, into out; their count. */
static int32_t prefilling_oldest_first(hx_server *s, hx_slot **out) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_slots; i++)
        if (s->at[i] && hx_turn_prefilling(s->at[i]->run)) out[n++] = s->at[i];
    for (int32_t a = 1; a < n; a++)  /* insertion sort by request number: n is at most --parallel */
        for (int32_t b = a; b > 0 && out[b]->j->seq < out[b - 1]->j->seq; b--) {
            hx_slot *t = out[b];
            out[b] = out[b - 1];
            out[b - 1] = t;
        }
    return n;
}

/* One iteration's engine work: the spans of the busy slots, one step, each turn's after-step. Every
 * generating slot's token first; then a grid chunk of at most --max-partial-prefills prompts, the
 * oldest first, so that concurrent prompts are read one after another and the first of them
 * answers early, rather than all in lockstep and all at the end (docs/serve.md, section 7). */
static void step(hx_server *s) {
    const int32_t budget = s->o->batch_size, max_pre = s->o->partial_prefills;
    int32_t n = 0, rows = 0, n_pre = 0;
    hx_slot **pre = s->pre_order;
    const int32_t n_cand = prefilling_oldest_first(s, pre);
    for (int pass = 0; pass < 2; pass++)  /* decode tokens first, then prefill chunks */
        for (int32_t i = 0; i < (pass == 0 ? s->n_slots : n_cand); i++) {
            hx_slot *sl = pass == 0 ? s->at[i] : pre[i];
            if (!sl || hx_turn_prefilling(sl->run) != (pass == 1)) continue;
            if (pass == 1 && max_pre > 0 && n_pre >= max_pre) break;
            eng_batch_span sp;
            if (!hx_turn_span(sl->run, &sp)) continue;
            if (n > 0 && budget > 0 && rows + sp.n > budget) continue;  /* waits for a later step, on its grid */
            s->spans[n] = sp;
            s->span_slot[n++] = sl;
            rows += sp.n;
            n_pre += pass == 1;
        }
    if (n == 0) return;
    const eng_batch_params bp = hx_session_batch_params(s->session);
    char err[512] = "";
    int rc = eng_batch_forward(s->batch, s->spans, n, &bp, err, sizeof err);
    for (int32_t k = 0; k < n; k++) {
        hx_slot *sl = s->span_slot[k];
        char why[1024] = "";
        int r2 = rc;
        if (rc != ENG_OK) snprintf(why, sizeof why, "the engine step: %s", err[0] ? err : eng_status_str(rc));
        else r2 = hx_turn_after_step(sl->run, why, sizeof why);
        if (r2 != ENG_OK) {
            job_abort(s, sl, r2, why);
            release_slot(s, sl);
        }
    }
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.steps++;
    s->metrics.step_rows += rows;
    s->metrics.step_spans += n;
    s->metrics.prefill_steps += n_pre > 0;
    s->metrics.step_prefills += n_pre;
    pthread_mutex_unlock(&s->metrics.mu);
}

/* The slots whose turn is over (done, or its client gone: cancelled at this chunk boundary): finished. */
static void finish_done(hx_server *s) {
    for (int32_t i = 0; i < s->n_slots; i++) {
        hx_slot *sl = s->at[i];
        if (!sl) continue;
        if (atomic_load(&sl->j->cancelled)) hx_turn_cancel(sl->run);
        if (!hx_turn_done(sl->run)) continue;
        job_finish(s, sl);
        release_slot(s, sl);
    }
}

static void *worker_main(void *arg) {
    hx_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->engine_mu);
        finish_done(s);
        update_slots(s);
        pthread_mutex_unlock(&s->engine_mu);
        pthread_mutex_lock(&s->q_mu);
        while (s->n_busy == 0 && s->q_len == 0 && !s->stopping) pthread_cond_wait(&s->q_cv, &s->q_mu);
        bool stop = s->stopping && s->n_busy == 0;
        pthread_mutex_unlock(&s->q_mu);
        if (stop) break;
        /* admissions, one at a time (each may take the slot the next one names), then the step */
        for (;;) {
            pthread_mutex_lock(&s->q_mu);
            hx_job *j = pop_admissible_locked(s);
            pthread_mutex_unlock(&s->q_mu);
            if (!j) break;
            if (atomic_load(&j->cancelled)) {
                drop_unrun(s, j);
                continue;
            }
            pthread_mutex_lock(&s->engine_mu);
            hx_slot *sl = NULL;  /* a free record (a request leaves its record where it is while it runs) */
            for (int32_t k = 0; !sl; k++)
                if (!s->run[k].j) sl = &s->run[k];
            if (admit(s, sl, j) != ENG_OK) release_slot(s, sl);
            pthread_mutex_unlock(&s->engine_mu);
        }
        pthread_mutex_lock(&s->engine_mu);
        step(s);
        update_slots(s);
        pthread_mutex_unlock(&s->engine_mu);
    }
    return NULL;
}

int hx_worker_start(hx_server *s, char *err, size_t errlen) {
    if (identity_seed(s)) return ENG_ERR_NOMEM;
    s->q_cap = s->o->queue > 0 ? s->o->queue : 1;
    s->n_run = s->o->parallel > 0 ? s->o->parallel : 1;
    s->ring = calloc((size_t)s->q_cap, sizeof *s->ring);
    s->run = calloc((size_t)s->n_run, sizeof *s->run);
    s->at = calloc((size_t)s->n_slots, sizeof *s->at);
    s->spans = calloc((size_t)s->n_run, sizeof *s->spans);
    s->span_slot = calloc((size_t)s->n_run, sizeof *s->span_slot);
    s->pre_order = calloc((size_t)s->n_slots, sizeof *s->pre_order);
    s->batch = eng_batch_new(hx_session_model(s->session));
    if (!s->ring || !s->run || !s->at || !s->spans || !s->span_slot || !s->pre_order || !s->batch) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < s->n_run; i++) s->run[i].index = -1;
    if (s->o->sp.fault && !strcmp(s->o->sp.fault, "batch-split-k")) eng_batch_set_fault(s->batch, ENG_BATCH_FAULT_SPLIT_K);
    pthread_mutex_init(&s->q_mu, NULL);
    pthread_cond_init(&s->q_cv, NULL);
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        eng_errf(err, errlen, "cannot start the engine worker thread");
        return ENG_ERR_IO;
    }
    s->worker_started = true;
    return ENG_OK;
}

void hx_worker_stop(hx_server *s) {
    if (!s->worker_started) {
        identity_free(s);
        return;
    }
    pthread_mutex_lock(&s->q_mu);
    s->stopping = true;
    while (s->q_len > 0) {  /* the queued requests: refused */
        hx_job *j = s->ring[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        hx_api_error e;
        hx_api_errf(&e, HX_API_ERR_UNAVAILABLE, NULL, "the server is stopping");
        job_fail(j, &e);
        job_unref(j);
    }
    pthread_cond_broadcast(&s->q_cv);
    pthread_mutex_unlock(&s->q_mu);
    pthread_join(s->worker, NULL);
    s->worker_started = false;
    identity_free(s);
}
