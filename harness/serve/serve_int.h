/*
 * harness/serve/serve_int.h: what the files of serve share: the server, a
 * request in flight (a job) and the slot it runs in, the queue, the
 * recorder, the script and the counters. Internal to harness/serve/.
 *
 * A job is shared by the connection thread that received it and the engine
 * worker that runs it; it is reference-counted (job_unref frees it with the
 * last reference) and its response fields are guarded by its mutex. Its
 * state only moves forward: QUEUED -> RUNNING -> HEADERS (the prompt is done:
 * status and headers are known, a stream may begin) -> DONE.
 */
#ifndef HX_SERVE_INT_H
#define HX_SERVE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "api.h"
#include "prepare.h"
#include "serve_opts.h"
#include "session.h"
#include "store.h"
#include "str.h"
#include "transcript.h"

// ----------------------------------------------------------------------------
// Counters (metrics.c)

#define HX_TTFT_BUCKETS 12
#define HX_METRICS_PATHS 64     /* distinct ignored-field paths counted apart */
#define HX_METRICS_DIALECTS 8   /* the API layer's registered dialects, at most (hx_api_dialects) */

typedef struct hx_metrics {
    pthread_mutex_t mu;
    int64_t requests[HX_METRICS_DIALECTS][6];  /* [dialect index in hx_api_dialects][status class: 2xx, 400,
                                                  401/404/405, 413, 503, 5xx] */
    int64_t prompt_tokens, reused_tokens, generated_tokens;
    int64_t verified, identical, diverged;
    int64_t sampling_not_honoured, ignored_fields;
    int64_t cancelled, refused_queue_full;
    int64_t scripted, side_requests, departures;
    int64_t ttft_bucket[HX_TTFT_BUCKETS + 1];  /* cumulative counts are written; +Inf last */
    double  ttft_sum_s;
    int64_t ttft_count;
    int64_t queue_depth;         /* gauge, set by the queue */
    int64_t steps, step_rows, step_spans;  /* engine steps; rows and spans in them (the batch's fill) */
    int64_t prefill_steps, step_prefills;  /* steps with a prompt chunk; prompt chunks in them */
    int64_t refused_memory;      /* 503: --max-prep-memory was reached */
    int64_t prep_bytes, prep_peak, prep_limit;  /* gauges, set by the admission (admit.c) */
    /* ignored fields by path (hx_api_req.ignored_paths): requests that carried each, the first
     * HX_METRICS_PATHS paths seen; later new paths are counted under "..." */
    char    ignored_path[HX_METRICS_PATHS][96];
    int64_t ignored_by_path[HX_METRICS_PATHS + 1];
    int32_t n_ignored_paths;
} hx_metrics;

void   hx_metrics_init(hx_metrics *m);
void   hx_metrics_destroy(hx_metrics *m);
/* One answered request: its dialect index, HTTP status. */
void   hx_metrics_status(hx_metrics *m, int dialect, int status);
void   hx_metrics_ttft(hx_metrics *m, double seconds);
/* A request's ignored-field paths counted by path; each path seen for the first time is written
 * once to `say` (stderr), if not NULL. */
void   hx_metrics_ignored(hx_metrics *m, char *const *paths, int32_t n, FILE *say);
/* Prometheus text exposition format (malloc'd), or NULL on OOM. */
char  *hx_metrics_text(hx_metrics *m);

// ----------------------------------------------------------------------------
// Admission (admit.c): the memory requests in preparation may hold, and the
// lanes large bodies are prepared in

#define HX_ADMIT_LARGE ((int64_t)1 << 20)  /* a body over this is large: 7/8 of the cap at most */
#define HX_ADMIT_LANE  ((int64_t)64 << 10) /* a body over this is prepared in a lane */

typedef struct hx_admit {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int64_t         limit;       /* --max-prep-memory */
    int64_t         held, peak;  /* bytes charged now, and at most so far */
    int32_t         lanes, busy; /* bodies prepared in lanes at once at most, and now */
    int32_t         n_ctx;       /* the context (a prompt that fits: its token arrays) */
    int32_t         per_byte;    /* bytes charged per body byte */
    hx_metrics     *m;           /* its gauges (may be NULL) */
} hx_admit;

/* keep_body: --record keeps bodies; normalize: a --normalize rule may copy a request. */
void    hx_admit_init(hx_admit *a, int64_t limit, int32_t lanes, int32_t n_ctx, bool keep_body, bool normalize,
                      hx_metrics *m);
void    hx_admit_destroy(hx_admit *a);
/* The bytes a request may hold at its peak while it is parsed and prepared: its body's length and
 * the JSON values in it (hx_admit_count_values; 0 before the body is known). */
int64_t hx_admit_estimate(const hx_admit *a, int64_t body_len, int64_t n_values);
/* The most a request may be charged: the cap, or 7/8 of it for a large body. */
int64_t hx_admit_room(const hx_admit *a, bool large);
/* What a request that fits keeps while it waits and runs: the body kept for --record, the
 * prompt's text (as received, normalized, rendered), its tokens. */
int64_t hx_admit_retained(const hx_admit *a, int64_t body_kept, int64_t text_len, int32_t n_tokens);
/* JSON values, keys and containers in a body (an upper bound for malformed JSON), in one pass. */
int64_t hx_admit_count_values(const char *body, size_t n);
/* Charges bytes (true), or refuses them (false: the charges would pass hx_admit_room). */
bool    hx_admit_charge(hx_admit *a, int64_t bytes, bool large);
void    hx_admit_release(hx_admit *a, int64_t bytes);
/* A lane for a body over HX_ADMIT_LANE: waits while every lane is busy; leaving with trim (a large
 * body) hands the memory the preparation freed back to the system. */
void    hx_admit_lane_enter(hx_admit *a);
void    hx_admit_lane_leave(hx_admit *a, bool trim);

// ----------------------------------------------------------------------------
// A request in flight

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_HEADERS, JOB_DONE } job_state;

typedef struct hx_job {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    atomic_int      refs;         /* job_ref / job_unref (any thread, with or without mu) */
    /* the request (set by the connection thread before it is queued, then read-only) */
    const hx_api_route *route;
    hx_api_req     q;            /* parsed; q.req normalized by hx_prepare */
    hx_request     received;     /* the prompt as received, before normalization (--record, the script) */
    hx_prepared    p;            /* rendered and tokenized */
    char          *body;         /* exactly as received (body_len bytes) */
    size_t         body_len;
    char          *target;       /* the request target, path and query ("/v1/messages?beta=true") */
    char          *headers;      /* the headers that shape the prompt or the session, canonical JSON */
    int64_t        seq;          /* the server's request number */
    double         t_received;   /* eng_now_s() when the body was complete */
    atomic_bool    cancelled;    /* the client went away */
    char           sampling[160];/* the sampling fields greedy decoding does not honour, "" (set with the request) */
    char          *key;          /* its session key (hx_serve_session_key of received), set with the request */
    /* the response (guarded by mu) */
    job_state      state;
    int            status;       /* HTTP status */
    hx_api_error   err;          /* the error when status >= 400 */
    hx_api_result  res;
    hx_api_stream  stream;       /* streamed responses: the SSE bytes the worker appends */
    eng_buf        out;          /* bytes to send: the whole body, or the stream so far */
    size_t         sent;         /* bytes of out handed to the connection */
    char           h_reused[24], h_prompt[24], h_identical[16], h_session[96], h_script[640];
    char           log[512];     /* the request's log line, written by the worker */
} hx_job;

hx_job *job_new(void);                 /* refs 1; NULL on OOM */
void    job_ref(hx_job *j);
void    job_unref(hx_job *j);          /* frees with the last reference */
/* Finishes j with an error (before or after its stream began); with j->mu held, or not. */
void    job_fail_locked(hx_job *j, const hx_api_error *e);
void    job_fail(hx_job *j, const hx_api_error *e);

// ----------------------------------------------------------------------------
// A job in a slot of the scheduler (job.c runs it, worker.c schedules it)

/* What serve notes about a request beyond its row: the script's part. */
typedef struct hx_notes {
    const hx_request *scripted;    /* the scripted turn answering it, or NULL */
    int32_t           script_index;
    char              departure[512];
    const char       *script_note;   /* a side request, or the script played out */
} hx_notes;

/* A generation in progress: what the session's callbacks keep between steps. */
typedef struct hx_gen {
    struct hx_server *s;
    hx_job           *j;
    const hx_request *scripted;   /* the scripted turn, or NULL: the model's tokens */
    int32_t           max_gen;
    eng_buf           text;       /* the generated bytes */
    size_t            released;   /* bytes of text streamed so far */
    size_t            stop_at;    /* where a stop string begins (SIZE_MAX: none) */
    size_t            hold;       /* bytes held back while a stop string may be forming */
    hx_api_finish     finish;
    double            t_prompt;   /* when the prompt was done */
    bool              stopped;
    bool              client_limit; /* max_gen is the request's own max_tokens (not serve's -n or the context) */
} hx_gen;

/* A request in flight: its job, its session turn in steps, its generation. The record stays where it
 * is while the request runs (the turn holds pointers into it); index is its slot (-1: not placed). */
typedef struct hx_slot {
    hx_job         *j;            /* NULL: the record is free */
    int32_t         index;
    hx_turn_run    *run;
    hx_gen          g;
    hx_notes        sn;
    hx_turn_gen     gen;
    hx_turn_result  r;
} hx_slot;

struct hx_server;
/* The job's generation set up and its session turn begun (the policy's acquire): ENG_OK, or the job is
 * failed (answered) and the slot holds no turn. idx: the request's req_index. */
int  job_begin(struct hx_server *s, hx_slot *sl, int32_t idx);
/* The turn over (done, or cancelled): ended (teacher-forced, released, its row), the result and the
 * counters, the record, the answer. */
void job_finish(struct hx_server *s, hx_slot *sl);
/* A step failed (rc, err): the turn aborted, the job failed. */
void job_abort(struct hx_server *s, hx_slot *sl, int rc, const char *err);

// ----------------------------------------------------------------------------
// The recorder (record.c): served requests appended to a transcript v2 file

typedef struct hx_recorder hx_recorder;

/* Opens path for appending (NULL: a recorder that writes nothing); a file
 * that exists is read (its sessions continue; a torn last line left by a
 * crash is cut off, said on stderr). ENG_OK, or an error with a message
 * (exit 2 for a bad file). */
int  hx_recorder_open(const char *path, const char *header_json, hx_recorder **out, char *err, size_t errlen);
void hx_recorder_close(hx_recorder *r);
/* The sessions of the file as opened and recorded since: how many, and the
 * last request of session k (its session name and turn). */
int32_t           hx_recorder_n_sessions(const hx_recorder *r);
/* The session key of a request (malloc'd; NULL on OOM): the importers' key (normalize.h: the normalized
 * system prompt and first message), so a conversation stays one session whatever its per-request
 * billing checksum; raw prompt and token requests share one key. The worker's session identity and
 * the record's sessions go by it. */
char             *hx_serve_session_key(const hx_request *q);
const hx_request *hx_recorder_last(const hx_recorder *r, int32_t k);
/* Appends q (its session and turn assigned by the worker, its response and
 * usage set, its `served` set) as one line, fsync'd: a crash loses at most
 * the line in flight; compact when q extends its session's last request. */
int  hx_recorder_add(hx_recorder *r, const hx_request *q, char *err, size_t errlen);

// ----------------------------------------------------------------------------
// The script (script.c)

typedef struct hx_script hx_script;

int  hx_script_open(const char *path, hx_script **out, char *err, size_t errlen);
void hx_script_close(hx_script *s);
/* Which scripted turn answers q: ENG_OK with *turn the script's request (its
 * response the turn to play) and *departure (buf) where q leaves what the
 * script expects ("" when it follows it); *turn NULL for a side request (not
 * the scripted conversation: answered by the model) or when the script is
 * played out (*exhausted). */
int  hx_script_next(hx_script *s, const hx_request *q, const hx_request **turn, int32_t *index, bool *exhausted,
                    char *departure, size_t cap);
int32_t hx_script_length(const hx_script *s);

// ----------------------------------------------------------------------------
// The server

typedef struct hx_server {
    const hx_serve_opts *o;
    hx_session        *session;      /* the engine: used by the worker only (and erase, under engine_mu) */
    pthread_mutex_t    engine_mu;
    const eng_tokenizer *tok;
    hx_prepare_ctx    *pc;           /* read-only after start: shared by every connection thread */
    int32_t            n_ctx;
    int32_t            n_vocab;
    hx_store          *store;
    int64_t            run_id;
    hx_recorder       *rec;
    hx_script         *script;
    /* session identity (worker.c): the importers' session key of a conversation -> its index;
     * its name ("serve-K", "serve-raw") and next turn. The worker's alone. */
    hx_strmap          id_keys;
    char             **id_names;     /* (n_ids) */
    int32_t           *id_next_turn; /* (n_ids) */
    int32_t            n_ids;
    hx_metrics         metrics;
    hx_admit           admit;
    hx_api_info        info;         /* /props, /v1/models */
    char               build_info[64], bos[64], eos[64];
    char               cache_json[512];  /* /props' "kvreplay": the cache rule a client should expect */
    /* the slots as the worker last saw them (GET /slots): max(--parallel, the policy's slots) */
    pthread_mutex_t    slots_mu;
    hx_api_slot       *slots;
    int32_t            n_slots;
    /* the scheduler (the worker's alone): --parallel records, the busy ones by slot, the step */
    hx_slot           *run;          /* (n_run) */
    int32_t            n_run, n_busy;
    hx_slot          **at;           /* (n_slots) the record in each slot, NULL: idle */
    eng_batch         *batch;
    eng_batch_span    *spans;        /* (n_run) */
    hx_slot          **span_slot;    /* (n_run) */
    hx_slot          **pre_order;    /* (n_slots) the slots reading their prompt, oldest first (scratch of a step) */
    /* the queue */
    pthread_mutex_t    q_mu;
    pthread_cond_t     q_cv;
    hx_job           **ring;
    int32_t            q_cap, q_head, q_len;
    bool               stopping;     /* no new request is queued; the queued ones are refused */
    pthread_t          worker;
    bool               worker_started;
    int64_t            n_engine;     /* engine requests so far (req_index) */
    int64_t            n_seq;        /* requests received so far */
    int32_t            eos_id, eot_id;
    int32_t            byte_tok;     /* an SPM byte token that stops the dummy-prefix strip (-1: none) */
    atomic_bool        said_diverged;
    atomic_int         n_answering;  /* generations whose answer is still being sent */
} hx_server;

/* worker.c: the queue and the engine worker; hx_worker_start takes the
 * recorder's sessions (a --record file that exists) as the first identities. */
int  hx_worker_start(hx_server *s, char *err, size_t errlen);
/* Queues j (taking a reference); false when the queue is full or stopping. */
bool hx_worker_submit(hx_server *s, hx_job *j);
/* Stops taking requests, refuses the queued ones (503), finishes the ones in
 * progress and joins the worker. */
void hx_worker_stop(hx_server *s);
/* A token's bytes as they appear in generated text (no SPM dummy-prefix
 * strip), into buf (cap); the length, or -1 when it does not fit. */
int64_t hx_token_bytes(const hx_server *s, int32_t id, char *buf, size_t cap);

/* serve.c: the dialect index of a route (for the metrics), the error of a
 * job answered from the worker. */
int  hx_serve_dialect_index(const hx_api_dialect *d);

#endif /* HX_SERVE_INT_H */
