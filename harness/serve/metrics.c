/*
 * harness/serve/metrics.c: serve's counters and their Prometheus text
 * exposition (GET /metrics, text/plain; version=0.0.4): requests by API and
 * status, prompt, reused and generated tokens, verified / identical /
 * diverged requests, requests whose sampling fields greedy decoding did not
 * honour, cancellations, refusals (a full queue, the preparation memory
 * cap), scripted and side requests, departures from the script, the memory
 * charged to requests in preparation, and a histogram of the time to first
 * token.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_int.h"
#include "status.h"
#include "util.h"

/* TTFT bucket bounds, seconds (the last bucket is +Inf). */
static const double k_ttft_le[HX_TTFT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const char *const k_class[6] = {"2xx", "400", "401_404_405", "413", "503", "5xx"};

void hx_metrics_init(hx_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void hx_metrics_destroy(hx_metrics *m) { pthread_mutex_destroy(&m->mu); }

void hx_metrics_status(hx_metrics *m, int dialect, int status) {
    int c = status < 300 ? 0 : status == 400 ? 1 : status == 413 ? 3 : status == 503 ? 4 : status >= 500 ? 5 : 2;
    if (dialect < 0 || dialect >= HX_METRICS_DIALECTS) dialect = 0;
    pthread_mutex_lock(&m->mu);
    m->requests[dialect][c]++;
    pthread_mutex_unlock(&m->mu);
}

void hx_metrics_ttft(hx_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < HX_TTFT_BUCKETS && seconds > k_ttft_le[b]) b++;
    m->ttft_bucket[b]++;
    m->ttft_sum_s += seconds;
    m->ttft_count++;
    pthread_mutex_unlock(&m->mu);
}

void hx_metrics_ignored(hx_metrics *m, char *const *paths, int32_t n, FILE *say) {
    pthread_mutex_lock(&m->mu);
    m->ignored_fields++;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = 0;
        while (k < m->n_ignored_paths && strcmp(m->ignored_path[k], paths[i])) k++;
        if (k == m->n_ignored_paths && k < HX_METRICS_PATHS && strlen(paths[i]) < sizeof m->ignored_path[0]) {
            snprintf(m->ignored_path[k], sizeof m->ignored_path[0], "%s", paths[i]);
            m->n_ignored_paths++;
            if (say) fprintf(say, "kvreplay serve: accepting a field it does not act on: %s (said once)\n", paths[i]);
        }
        m->ignored_by_path[k < m->n_ignored_paths ? k : HX_METRICS_PATHS]++;
    }
    pthread_mutex_unlock(&m->mu);
}

static void counter(eng_buf *b, const char *name, const char *help, int64_t v) {
    eng_buf_printf(b, "# HELP kvreplay_%s %s\n# TYPE kvreplay_%s counter\nkvreplay_%s %" PRId64 "\n", name, help, name,
                   name, v);
}

static void gauge(eng_buf *b, const char *name, const char *help, int64_t v) {
    eng_buf_printf(b, "# HELP kvreplay_%s %s\n# TYPE kvreplay_%s gauge\nkvreplay_%s %" PRId64 "\n", name, help, name,
                   name, v);
}

char *hx_metrics_text(hx_metrics *m) {
    eng_buf b = {0};
    pthread_mutex_lock(&m->mu);
    hx_metrics c = *m;  /* a consistent copy */
    pthread_mutex_unlock(&m->mu);
    eng_buf_printf(&b, "# HELP kvreplay_requests_total Requests answered, by API and status.\n"
                       "# TYPE kvreplay_requests_total counter\n");
    for (int d = 0; d < HX_METRICS_DIALECTS && hx_api_dialects[d]; d++)
        for (int k = 0; k < 6; k++)
            eng_buf_printf(&b, "kvreplay_requests_total{api=\"%s\",status=\"%s\"} %" PRId64 "\n", hx_api_dialects[d]->name,
                           k_class[k], c.requests[d][k]);
    counter(&b, "prompt_tokens_total", "Prompt tokens of the requests the engine ran.", c.prompt_tokens);
    counter(&b, "reused_tokens_total", "Prompt tokens whose state came from the cache.", c.reused_tokens);
    counter(&b, "generated_tokens_total", "Tokens generated for clients (greedy).", c.generated_tokens);
    counter(&b, "verified_total", "Requests compared with their cold run (--verify).", c.verified);
    counter(&b, "identical_total", "Verified requests bit-identical to cold (logits, decode steps, state).",
            c.identical);
    counter(&b, "diverged_total", "Verified requests that differ from cold.", c.diverged);
    counter(&b, "sampling_not_honoured_total",
            "Requests whose sampling fields greedy decoding does not honour (temperature > 0, penalties, ...).",
            c.sampling_not_honoured);
    eng_buf_printf(&b, "# HELP kvreplay_ignored_fields_total Requests with a body field kvreplay accepts but does not "
                       "act on, by the field's path.\n# TYPE kvreplay_ignored_fields_total counter\n");
    for (int32_t k = 0; k < c.n_ignored_paths; k++) {
        eng_buf_printf(&b, "kvreplay_ignored_fields_total{path=\"");
        for (const char *p = c.ignored_path[k]; *p; p++)  /* a label value escapes \\, \" and newlines */
            eng_buf_printf(&b, *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : "%c", *p);
        eng_buf_printf(&b, "\"} %" PRId64 "\n", c.ignored_by_path[k]);
    }
    if (c.ignored_by_path[HX_METRICS_PATHS])
        eng_buf_printf(&b, "kvreplay_ignored_fields_total{path=\"...\"} %" PRId64 "\n", c.ignored_by_path[HX_METRICS_PATHS]);
    counter(&b, "cancelled_total", "Requests whose client went away before the end.", c.cancelled);
    counter(&b, "refused_queue_full_total", "Requests refused with 503: the queue was full.", c.refused_queue_full);
    counter(&b, "engine_steps_total", "Engine steps (one eng_batch_forward over the slots' spans).", c.steps);
    counter(&b, "engine_step_rows_total", "Token rows computed in those steps.", c.step_rows);
    counter(&b, "engine_step_spans_total", "Spans in those steps (one per slot in a step).", c.step_spans);
    counter(&b, "engine_prefill_steps_total", "Steps that read a prompt chunk.", c.prefill_steps);
    counter(&b, "engine_step_prefills_total", "Prompt chunks in those steps (at most --max-partial-prefills each).",
            c.step_prefills);
    counter(&b, "scripted_total", "Requests answered with a scripted turn (--script).", c.scripted);
    counter(&b, "side_requests_total", "Requests outside the scripted conversation, answered by the model.",
            c.side_requests);
    counter(&b, "script_departures_total", "Scripted requests that departed from what the script expects.",
            c.departures);
    counter(&b, "refused_memory_total",
            "Requests refused with 503: the memory of the requests in preparation was at --max-prep-memory.",
            c.refused_memory);
    eng_buf_printf(&b, "# HELP kvreplay_queue_depth Requests waiting for the engine.\n"
                       "# TYPE kvreplay_queue_depth gauge\nkvreplay_queue_depth %" PRId64 "\n", c.queue_depth);
    gauge(&b, "prep_memory_bytes", "Memory charged to the requests received and not yet answered (estimated).",
          c.prep_bytes);
    gauge(&b, "prep_memory_peak_bytes", "The most memory charged to requests at once since the start.", c.prep_peak);
    gauge(&b, "prep_memory_limit_bytes", "--max-prep-memory: the charge at which requests are refused (503).",
          c.prep_limit);
    eng_buf_printf(&b, "# HELP kvreplay_ttft_seconds Time to first token, received to the prompt's last logits.\n"
                       "# TYPE kvreplay_ttft_seconds histogram\n");
    int64_t cum = 0;
    for (int i = 0; i < HX_TTFT_BUCKETS; i++) {
        cum += c.ttft_bucket[i];
        eng_buf_printf(&b, "kvreplay_ttft_seconds_bucket{le=\"%g\"} %" PRId64 "\n", k_ttft_le[i], cum);
    }
    cum += c.ttft_bucket[HX_TTFT_BUCKETS];
    eng_buf_printf(&b, "kvreplay_ttft_seconds_bucket{le=\"+Inf\"} %" PRId64 "\n", cum);
    eng_buf_printf(&b, "kvreplay_ttft_seconds_sum %.6f\nkvreplay_ttft_seconds_count %" PRId64 "\n", c.ttft_sum_s,
                   c.ttft_count);
    if (!b.data) eng_buf_append(&b, "", 0);
    return b.data;
}
