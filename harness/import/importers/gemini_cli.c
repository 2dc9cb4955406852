/*
 * harness/import/importers/gemini_cli.c: `--from gemini-cli`: a Gemini CLI chat log
 * (~/.gemini/tmp/<project>/chats/session-*.jsonl; older versions wrote one JSON document,
 * session-*.json, {"sessionId", "messages": [...]}, read the same way).
 *
 * The JSONL log: a header line {"sessionId", "projectHash", "startTime", ...}; records {"id",
 * "timestamp", "type", "content", ...}, a record whose id was seen before replacing it (the CLI writes a
 * model turn again once its tool calls ran); and {"$set": {...}} updates, whose "messages" replaces the
 * records so far (the session's opening context). Record types:
 *
 *   user    content: the parts sent (text, functionResponse, ...) or a string: a user message
 *   gemini  one model call: content (its text), thoughts ({subject, description}), toolCalls
 *           ({id, name, args}), tokens ({input, cached, ...}: the call's usage), model
 * Records of other types (info, error, warning, ...) are skipped and counted, never fatal. The parts
 * are read by the Gemini dialect's own parser (api/gemini.c).
 *
 * One model call per gemini record: its prompt is every user and gemini record before it. The log keeps
 * neither the system instruction nor the tools, so an imported prompt is what the log holds, not byte
 * for byte what was sent (`serve --record` keeps that); --system-file and --tools-file supply them.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "errors.h"
#include "import.h"
#include "importer.h"
#include "jsonl.h"
#include "status.h"
#include "str.h"
#include "util.h"

/* A record's fields kvreplay reads (the rest is counted as unknown). */
static const hx_api_shape k_record = {.members = HX_API_MEMBERS(
    {"id", NULL}, {"timestamp", NULL}, {"type", NULL}, {"content", NULL}, {"thoughts", NULL}, {"tokens", NULL},
    {"model", NULL}, {"toolCalls", HX_API_ARR(HX_API_OBJ({"id", NULL}, {"name", NULL}, {"args", NULL}))})};

typedef struct record {
    json_t *j;       /* the record (owned) */
    int64_t line;
} record;

typedef struct records {
    record *r;
    size_t  n, cap;
} records;

static void records_clear(records *rs) {
    for (size_t i = 0; i < rs->n; i++) json_decref(rs->r[i].j);
    rs->n = 0;
}

/* Adds j (a reference is taken), replacing a record with the same id. */
static int records_put(records *rs, json_t *j, int64_t line) {
    const char *id = json_string_value(json_object_get(j, "id"));
    for (size_t i = 0; id && i < rs->n; i++) {
        const char *have = json_string_value(json_object_get(rs->r[i].j, "id"));
        if (!have || strcmp(id, have)) continue;
        json_decref(rs->r[i].j);
        rs->r[i].j = json_incref(j);
        rs->r[i].line = line;
        return ENG_OK;
    }
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 64;
        record *nr = realloc(rs->r, sizeof *nr * cap);
        if (!nr) return ENG_ERR_NOMEM;
        rs->r = nr;
        rs->cap = cap;
    }
    rs->r[rs->n++] = (record){json_incref(j), line};
    return ENG_OK;
}

/* A model record as a Gemini content: thoughts, the text, the tool calls. NULL on OOM; bad fields -> err. */
static json_t *model_content(const json_t *rec, const char *path, int64_t line, char *err, size_t errlen, int *rc) {
    json_t *parts = json_array();
    const json_t *content = json_object_get(rec, "content"), *thoughts = json_object_get(rec, "thoughts"),
                 *calls = json_object_get(rec, "toolCalls");
    *rc = ENG_OK;
    if (!parts) { *rc = ENG_ERR_NOMEM; return NULL; }
    for (size_t i = 0; i < json_array_size(thoughts); i++) {
        const json_t *t = json_array_get(thoughts, i);
        const char *subj = json_string_value(json_object_get(t, "subject")), *desc = json_string_value(json_object_get(t, "description"));
        char *text = NULL;
        if (asprintf(&text, "%s%s%s", subj ? subj : "", subj && desc ? "\n" : "", desc ? desc : "") < 0) { *rc = ENG_ERR_NOMEM; break; }
        if (text[0]) json_array_append_new(parts, json_pack("{s:s, s:b}", "text", text, "thought", 1));
        free(text);
    }
    if (json_is_string(content) && json_string_length(content))
        json_array_append_new(parts, json_pack("{s:O}", "text", content));
    else if (json_is_array(content))
        for (size_t i = 0; i < json_array_size(content); i++) json_array_append(parts, json_array_get(content, i));
    else if (content && !json_is_string(content) && !json_is_null(content)) {
        hx_errf_at(err, errlen, path, line, "content", "expected a string or an array of parts");
        *rc = ENG_ERR_FORMAT;
    }
    if (calls && !json_is_array(calls)) {
        hx_errf_at(err, errlen, path, line, "toolCalls", "expected an array");
        *rc = ENG_ERR_FORMAT;
    }
    for (size_t i = 0; !*rc && i < json_array_size(calls); i++) {
        const json_t *c = json_array_get(calls, i);
        json_t *fc = json_object();
        const char *keys[] = {"id", "name", "args"};
        for (int k = 0; fc && k < 3; k++)
            if (json_object_get(c, keys[k])) json_object_set(fc, keys[k], json_object_get(c, keys[k]));
        json_array_append_new(parts, json_pack("{s:o}", "functionCall", fc));
    }
    if (*rc) { json_decref(parts); return NULL; }
    return json_pack("{s:s, s:o}", "role", "model", "parts", parts);
}

/* The records -> calls. */
static int build(const hx_import_opts *o, const records *rs, const char *name, const char *path, hx_transcript *out,
                 int64_t *n_skipped, hx_block_opts *opts, char *err, size_t errlen) {
    hx_request conv = {0};
    conv.response.role = HX_ROLE_ASSISTANT;
    int32_t turn = 0;
    int rc = ENG_OK;
    for (size_t i = 0; i < rs->n && !rc; i++) {
        const json_t *rec = rs->r[i].j;
        int64_t line = rs->r[i].line;
        const char *type = json_string_value(json_object_get(rec, "type"));
        bool user = type && !strcmp(type, "user"), model = type && !strcmp(type, "gemini");
        if (!user && !model) {
            if (o->stats) {
                o->stats->skipped_line_types++;
                hx_imp_list_add(o->stats->skipped_types, sizeof o->stats->skipped_types, type ? type : "(none)");
            }
            continue;
        }
        json_t *content = NULL;
        if (user) {
            const json_t *c = json_object_get(rec, "content");
            content = json_is_string(c) ? json_pack("{s:s, s:[{s:O}]}", "role", "user", "parts", "text", c)
                      : json_is_array(c) ? json_pack("{s:s, s:O}", "role", "user", "parts", c) : NULL;
            if (!content) {
                hx_errf_at(err, errlen, path, line, "content", c ? "expected a string or an array of parts" : "missing");
                rc = ENG_ERR_FORMAT;
            }
        } else {
            content = model_content(rec, path, line, err, errlen, &rc);
        }
        hx_request next = {0};
        next.response.role = HX_ROLE_ASSISTANT;
        if (!rc) rc = hx_request_copy(&next, &conv);
        if (!rc) rc = hx_api_gemini_content(content, path, line, user ? "content" : "gemini", opts, &next, err, errlen);
        if (!rc && model) {  /* one call: the conversation before it, this record as its response */
            hx_request q;
            rc = hx_request_copy(&q, &conv);
            if (!rc) {
                free(q.session);
                q.session = hx_strdup(name);
                q.turn = turn++;
                q.line = line;
                hx_message_free(&q.response);
                rc = hx_message_copy(&q.response, &next.messages[next.n_messages - 1]);
                const json_t *tk = json_object_get(rec, "tokens");
                const json_t *in = json_object_get(tk, "input"), *ca = json_object_get(tk, "cached");
                if (json_is_integer(in) && json_integer_value(in) >= 0) {
                    int64_t cached = json_is_integer(ca) ? json_integer_value(ca) : 0;
                    if (cached >= 0 && cached <= json_integer_value(in))
                        q.usage = (hx_call_usage){.present = true, .input = json_integer_value(in) - cached,
                                                  .cache_read = cached, .prompt_tokens = -1};
                }
                if (!rc && !q.session) rc = ENG_ERR_NOMEM;
                if (!rc) rc = hx_transcript_push(out, &q);
                if (rc) hx_request_free(&q);
            }
        }
        json_decref(content);
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            hx_request_free(&next);
            rc = ENG_OK;
            continue;
        }
        if (!rc) {
            hx_imp_note_unknown(o, rec, &k_record, "");
            hx_request_free(&conv);
            conv = next;
        } else {
            hx_request_free(&next);
        }
    }
    hx_request_free(&conv);
    return rc;
}

static int gemini_import(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                         int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    char name[256];
    bool named = o->session != NULL;
    if (o->session) snprintf(name, sizeof name, "%s", o->session);
    else hx_imp_base_name(path, name, sizeof name);
    records rs = {0};
    hx_block_opts opts = {.lenient = true};
    int rc = ENG_OK;
    json_error_t je;
    json_t *whole = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
    if (json_is_object(whole) && json_is_array(json_object_get(whole, "messages"))) {  /* session-*.json */
        const json_t *ms = json_object_get(whole, "messages"), *sid = json_object_get(whole, "sessionId");
        if (!named && json_is_string(sid)) snprintf(name, sizeof name, "%s", json_string_value(sid));
        for (size_t i = 0; !rc && i < json_array_size(ms); i++) {
            const json_t *m = json_array_get(ms, i);
            if (!json_is_object(m)) {
                char f[64];
                hx_imp_fieldf(f, "messages[%zu]", i);
                hx_errf_at(err, errlen, path, 0, f, "expected a record object");
                rc = ENG_ERR_FORMAT;
            } else rc = records_put(&rs, (json_t *)m, 0);
        }
    } else {
        size_t pos = 0;
        int64_t lineno = 0;
        const char *s;
        size_t len;
        while (!rc && hx_imp_next_line(data, n, &pos, &lineno, &s, &len)) {
            size_t n_big = 0;
            json_t *j = hx_imp_load_line(data, n, s, len, path, lineno, &n_big, err, errlen);
            if (!j) rc = ENG_ERR_FORMAT;
            else if (json_object_get(j, "$set")) {
                const json_t *set = json_object_get(j, "$set"), *ms = json_object_get(set, "messages");
                if (!json_is_object(set)) {
                    hx_errf_at(err, errlen, path, lineno, "$set", "expected an object");
                    rc = ENG_ERR_FORMAT;
                } else if (ms && !json_is_array(ms)) {
                    hx_errf_at(err, errlen, path, lineno, "$set.messages", "expected an array");
                    rc = ENG_ERR_FORMAT;
                } else if (ms) {
                    records_clear(&rs);
                    for (size_t i = 0; !rc && i < json_array_size(ms); i++)
                        if (json_is_object(json_array_get(ms, i))) rc = records_put(&rs, json_array_get(ms, i), lineno);
                }
            } else if (json_object_get(j, "type") || json_object_get(j, "id")) {
                const json_t *t = json_object_get(j, "type");
                if (!json_is_string(t)) {
                    hx_errf_at(err, errlen, path, lineno, "type", t ? "expected a string" : "missing");
                    rc = ENG_ERR_FORMAT;
                } else rc = records_put(&rs, j, lineno);
            } else if (json_object_get(j, "sessionId")) {  /* the header */
                const json_t *sid = json_object_get(j, "sessionId");
                if (!json_is_string(sid)) {
                    hx_errf_at(err, errlen, path, lineno, "sessionId", "expected a string");
                    rc = ENG_ERR_FORMAT;
                } else if (!named) snprintf(name, sizeof name, "%s", json_string_value(sid));
            } else if (o->stats) {  /* a line of a shape this importer does not know */
                o->stats->skipped_line_types++;
                hx_imp_list_add(o->stats->skipped_types, sizeof o->stats->skipped_types, "(untyped)");
            }
            if (j && o->stats) o->stats->big_integers += (int64_t)n_big;
            json_decref(j);
            if (rc == ENG_ERR_FORMAT && o->skip_bad) {
                (*n_skipped)++;
                rc = ENG_OK;
            }
        }
    }
    json_decref(whole);
    if (!rc) rc = build(o, &rs, name, path, out, n_skipped, &opts, err, errlen);
    if (o->stats) o->stats->unknown_blocks += opts.n_unknown;
    records_clear(&rs);
    free(rs.r);
    return rc;
}

const hx_importer hx_importer_gemini_cli = {
    .name = "gemini-cli",
    .help = "a Gemini CLI chat log (~/.gemini/tmp/<project>/chats/session-*.jsonl, or *.json)",
    .import = gemini_import,
};
