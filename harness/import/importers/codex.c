/*
 * harness/import/importers/codex.c: `--from codex`: a Codex CLI session rollout
 * (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl). Each line is {"timestamp", "type", "payload"}:
 *
 *   session_meta   the session's id (the session name unless --session) and base_instructions.text,
 *                  which Codex sends as the first developer message: the first system block;
 *   response_item  an item of the Responses API's input as Codex sent or received it (message,
 *                  function_call, function_call_output, custom_tool_call(_output), reasoning), read by
 *                  the Responses dialect's own item parser (api/responses.c);
 *   event_msg      UI events; token_count gives the last call's usage (input, cached input);
 *   turn_context   the turn's settings (read for nothing);
 *   compacted      a compaction: its replacement_history, when given, becomes the conversation.
 * Lines of any other type (world_state, token_usage_record, ...) are skipped and counted, never fatal.
 *
 * One model call per run of assistant items (reasoning, assistant messages, function calls) after a
 * non-assistant item: its prompt is every item before the run, its response the run. The rollout keeps
 * neither the tools nor Codex's own developer messages that are not response items, so an imported
 * prompt is what the rollout holds, not byte for byte what was sent (`serve --record` keeps that);
 * --system-file and --tools-file supply them. A bad line is "FILE:LINE: FIELD: what" (or skipped
 * with --skip-bad).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "errors.h"
#include "import.h"
#include "importer.h"
#include "status.h"
#include "str.h"
#include "util.h"

typedef struct codex_run {
    hx_request  conv;      /* the conversation so far */
    hx_request  prompt;    /* the open call's prompt (valid while open) */
    hx_request  resp;      /* the open call's assistant items */
    bool        open;
    int32_t     turn;
    char        name[256];
    bool        named;     /* --session, or a session_meta id seen */
    hx_block_opts opts;
} codex_run;

static bool is_assistant_item(const json_t *it) {
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!type) return role && !strcmp(role, "assistant");
    return !strcmp(type, "function_call") || !strcmp(type, "custom_tool_call") || !strcmp(type, "reasoning") ||
           (!strcmp(type, "message") && role && !strcmp(role, "assistant"));
}

/* Closes the open call: its prompt with the run as response, pushed to out. */
static int close_call(codex_run *c, hx_transcript *out) {
    if (!c->open) return ENG_OK;
    c->open = false;
    hx_request q = c->prompt;
    memset(&c->prompt, 0, sizeof c->prompt);
    int rc = ENG_OK;
    free(q.session);
    q.session = hx_strdup(c->name);
    q.turn = c->turn++;
    hx_message_free(&q.response);
    q.response.role = HX_ROLE_ASSISTANT;
    for (int32_t m = 0; !rc && m < c->resp.n_messages; m++)
        rc = hx_imp_append_blocks(&q.response, &c->resp.messages[m]);
    hx_request_free(&c->resp);
    if (!q.session) rc = ENG_ERR_NOMEM;
    if (!rc) rc = hx_transcript_push(out, &q);
    if (rc) hx_request_free(&q);
    return rc;
}

static int system_block(hx_request *q, const char *text) {
    hx_block *b = realloc(q->system, sizeof *b * (size_t)(q->n_system + 1));
    if (!b) return ENG_ERR_NOMEM;
    q->system = b;
    if (hx_block_init(&q->system[q->n_system], HX_BLOCK_TEXT, text, NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
    q->n_system++;
    return ENG_OK;
}

/* token_count: info.last_token_usage {input_tokens, cached_input_tokens} -> the last call's usage. */
static void take_usage(const json_t *p, hx_transcript *out) {
    const json_t *u = json_object_get(json_object_get(p, "info"), "last_token_usage");
    const json_t *in = json_object_get(u, "input_tokens"), *ca = json_object_get(u, "cached_input_tokens");
    if (!out->n || !json_is_integer(in) || json_integer_value(in) < 0) return;
    int64_t cached = json_is_integer(ca) && json_integer_value(ca) >= 0 ? json_integer_value(ca) : 0;
    if (cached > json_integer_value(in)) return;
    hx_request *q = &out->reqs[out->n - 1];
    q->usage.present = true;
    q->usage.input = json_integer_value(in) - cached;
    q->usage.cache_read = cached;
    q->usage.cache_creation = 0;
    q->usage.prompt_tokens = -1;
}

/* One line's object -> the run. */
static int take_line(codex_run *c, const hx_import_opts *o, json_t *j, const char *path, int64_t line,
                     hx_transcript *out, char *err, size_t errlen) {
    const json_t *jt = json_object_get(j, "type"), *p = json_object_get(j, "payload");
    const char *type = json_string_value(jt);
    if (!type) {
        hx_errf_at(err, errlen, path, line, "type", jt ? "expected a string" : "missing");
        return ENG_ERR_FORMAT;
    }
    bool known = !strcmp(type, "session_meta") || !strcmp(type, "response_item") || !strcmp(type, "event_msg") ||
                 !strcmp(type, "turn_context") || !strcmp(type, "compacted");
    if (!known) {  /* a newer Codex's line type: skipped, counted */
        if (o->stats) {
            o->stats->skipped_line_types++;
            hx_imp_list_add(o->stats->skipped_types, sizeof o->stats->skipped_types, type);
        }
        return ENG_OK;
    }
    if (!json_is_object(p)) {
        hx_errf_at(err, errlen, path, line, "payload", p ? "expected an object" : "missing");
        return ENG_ERR_FORMAT;
    }
    if (!strcmp(type, "session_meta")) {
        const json_t *id = json_object_get(p, "id"), *bi = json_object_get(p, "base_instructions");
        const json_t *text = json_is_object(bi) ? json_object_get(bi, "text") : json_object_get(p, "instructions");
        if (id && !json_is_string(id)) {
            hx_errf_at(err, errlen, path, line, "payload.id", "expected a string");
            return ENG_ERR_FORMAT;
        }
        if (text && !json_is_null(text) && !json_is_string(text)) {
            hx_errf_at(err, errlen, path, line, json_is_object(bi) ? "payload.base_instructions.text" : "payload.instructions",
                       "expected a string");
            return ENG_ERR_FORMAT;
        }
        if (!c->named && json_is_string(id)) {
            snprintf(c->name, sizeof c->name, "%s", json_string_value(id));
            c->named = true;
        }
        if (json_is_string(text) && json_string_length(text) && c->conv.n_messages == 0 && c->conv.n_system == 0)
            return system_block(&c->conv, json_string_value(text));
        return ENG_OK;
    }
    if (!strcmp(type, "event_msg")) {
        const char *et = json_string_value(json_object_get(p, "type"));
        if (et && !strcmp(et, "token_count")) {
            int rc = close_call(c, out);  /* the call the count is for has ended */
            if (rc) return rc;
            take_usage(p, out);
        }
        return ENG_OK;
    }
    if (!strcmp(type, "turn_context")) return ENG_OK;
    if (!strcmp(type, "compacted")) {
        const json_t *rh = json_object_get(p, "replacement_history");
        if (!json_is_array(rh)) return ENG_OK;  /* a summary only: the next items say what Codex sends */
        int rc = close_call(c, out);
        if (rc) return rc;
        hx_request fresh = {0};
        fresh.response.role = HX_ROLE_ASSISTANT;
        for (int32_t i = 0; !rc && i < c->conv.n_system; i++) rc = system_block(&fresh, c->conv.system[i].text);
        char f[HX_IMP_FIELD_MAX];
        for (size_t i = 0; !rc && i < json_array_size(rh); i++) {
            hx_imp_fieldf(f, "payload.replacement_history[%zu]", i);
            rc = hx_api_responses_item(json_array_get(rh, i), path, line, f, &c->opts, &fresh, err, errlen);
        }
        if (rc) { hx_request_free(&fresh); return rc; }
        hx_request_free(&c->conv);
        c->conv = fresh;
        return ENG_OK;
    }
    /* response_item */
    int rc;
    bool asst = is_assistant_item(p);
    if (!asst && (rc = close_call(c, out))) return rc;
    if (asst && !c->open) {
        if ((rc = hx_request_copy(&c->prompt, &c->conv))) return rc;
        memset(&c->resp, 0, sizeof c->resp);
        c->prompt.line = line;
        c->open = true;
    }
    /* parse into a scratch request first: a bad item leaves the conversation as it was */
    hx_request one = {0};
    one.response.role = HX_ROLE_ASSISTANT;
    if (!asst && (rc = hx_request_copy(&one, &c->conv))) return rc;
    rc = hx_api_responses_item(p, path, line, "payload", &c->opts, asst ? &c->resp : &one, err, errlen);
    if (rc) {
        hx_request_free(&one);
        return rc;
    }
    hx_block_opts again = {.lenient = true};  /* the same item into the conversation: counted once, above */
    if (asst) rc = hx_api_responses_item(p, path, line, "payload", &again, &c->conv, err, errlen);
    else {
        hx_request_free(&c->conv);
        c->conv = one;
    }
    if (!rc) hx_imp_note_unknown(o, p, &hx_api_responses_item_shape, "payload");
    return rc;
}

static int codex_import(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                        int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    codex_run c = {.opts = {.lenient = true}};
    c.conv.response.role = HX_ROLE_ASSISTANT;
    if (o->session) snprintf(c.name, sizeof c.name, "%s", o->session);
    else hx_imp_base_name(path, c.name, sizeof c.name);
    c.named = o->session != NULL;
    size_t pos = 0;
    int64_t lineno = 0;
    const char *s;
    size_t len;
    int rc = ENG_OK;
    while (hx_imp_next_line(data, n, &pos, &lineno, &s, &len)) {
        size_t n_big = 0;
        json_t *j = hx_imp_load_line(data, n, s, len, path, lineno, &n_big, err, errlen);
        rc = j ? take_line(&c, o, j, path, lineno, out, err, errlen) : ENG_ERR_FORMAT;
        if (j && o->stats) o->stats->big_integers += (int64_t)n_big;
        json_decref(j);
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc) break;
    }
    if (!rc) rc = close_call(&c, out);
    if (o->stats) {
        o->stats->unknown_blocks += c.opts.n_unknown;
        hx_imp_list_add(o->stats->unknown_types, sizeof o->stats->unknown_types, c.opts.unknown_types);
        o->stats->empty_thinking += c.opts.n_empty_thinking;
    }
    hx_request_free(&c.conv);
    hx_request_free(&c.prompt);
    hx_request_free(&c.resp);
    return rc;
}

const hx_importer hx_importer_codex = {
    .name = "codex",
    .help = "a Codex CLI session rollout (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl)",
    .import = codex_import,
};
