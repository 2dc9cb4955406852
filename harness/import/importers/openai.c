/*
 * harness/import/importers/openai.c: `--from openai`: JSONL of
 * chat-completions request bodies, one model call per line; sessions by key
 * and responses from the next request (import.c). Its message rules serve
 * the SWE-agent importer too (hx_imp_openai_message).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "importer.h"
#include "status.h"
#include "util.h"

/* content: string, null or an array of parts -> blocks appended to m. */
static int oa_content(const json_t *c, const char *path, int64_t line, const char *field, hx_message *m,
                      bool skip_empty, char *err, size_t errlen) {
    char f[HX_IMP_FIELD_MAX];
    hx_block b;
    if (!c || json_is_null(c)) return ENG_OK;
    if (json_is_string(c)) {
        if (skip_empty && json_string_length(c) == 0) return ENG_OK;
        if (hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(c), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        goto push;
    }
    if (!json_is_array(c)) {
        hx_errf_at(err, errlen, path, line, field, "expected a string, null or an array of parts");
        return ENG_ERR_FORMAT;
    }
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *p = json_array_get(c, i);
        hx_imp_fieldf(f, "%s[%zu]", field, i);
        const char *type = json_is_object(p) ? json_string_value(json_object_get(p, "type")) : NULL;
        if (!type) {
            hx_errf_at(err, errlen, path, line, f, "expected a content part with a string \"type\"");
            return ENG_ERR_FORMAT;
        }
        const char *ph = NULL;
        if (!strcmp(type, "text") || !strcmp(type, "refusal")) {
            const json_t *t = json_object_get(p, type);
            if (!json_is_string(t)) {
                char g[HX_IMP_FIELD_MAX];
                hx_imp_fieldf(g, "%s.%s", f, type);
                hx_errf_at(err, errlen, path, line, g, t ? "expected a string" : "missing");
                return ENG_ERR_FORMAT;
            }
            if (hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(t), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        } else {
            if (!strcmp(type, "image_url") || !strcmp(type, "image")) ph = "[image]";
            else if (!strcmp(type, "input_audio")) ph = "[audio]";
            else if (!strcmp(type, "file")) ph = "[file]";
            else {
                char g[HX_IMP_FIELD_MAX];
                hx_imp_fieldf(g, "%s.type", f);
                hx_errf_at(err, errlen, path, line, g, "unknown content part type \"%s\"", type);
                return ENG_ERR_FORMAT;
            }
            if (hx_block_init(&b, HX_BLOCK_IMAGE, ph, NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        }
        if (hx_message_push_block(m, &b)) {
            hx_block_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    return ENG_OK;
push:
    if (hx_message_push_block(m, &b)) {
        hx_block_free(&b);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

/* Flattens content (string, null, parts) into one string. */
static int oa_flat(const json_t *c, const char *path, int64_t line, const char *field, char **out, char *err, size_t errlen) {
    hx_message m = {0};
    *out = NULL;
    int rc = oa_content(c, path, line, field, &m, false, err, errlen);
    if (rc) {
        hx_message_free(&m);  /* the parts converted before the bad one */
        return rc;
    }
    eng_buf b = {0};
    for (int32_t i = 0; i < m.n_blocks && !rc; i++)
        if ((i && eng_buf_append(&b, "\n", 1)) || eng_buf_append(&b, m.blocks[i].text, strlen(m.blocks[i].text)))
            rc = ENG_ERR_NOMEM;
    hx_message_free(&m);
    if (!rc && !b.data && eng_buf_append(&b, "", 0)) rc = ENG_ERR_NOMEM;
    if (rc) {
        eng_buf_free(&b);
        return rc;
    }
    *out = b.data;
    return ENG_OK;
}

/* One OpenAI-style message -> *m. *is_system is set for system/developer. */
int hx_imp_openai_message(const json_t *j, const char *path, int64_t line, const char *field, hx_message *m,
                      bool *is_system, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    *is_system = false;
    char f[HX_IMP_FIELD_MAX];
    int rc;
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, field, "expected a message object");
        return ENG_ERR_FORMAT;
    }
    const json_t *jr = json_object_get(j, "role");
    const char *role = json_string_value(jr);
    hx_imp_fieldf(f, "%s.content", field);
    const json_t *content = json_object_get(j, "content");
    if (!role) {
        hx_imp_fieldf(f, "%s.role", field);
        hx_errf_at(err, errlen, path, line, f, jr ? "expected a string" : "missing");
        return ENG_ERR_FORMAT;
    }
    if (!strcmp(role, "system") || !strcmp(role, "developer")) {
        *is_system = true;
        m->role = HX_ROLE_SYSTEM;
        rc = oa_content(content, path, line, f, m, false, err, errlen);
    } else if (!strcmp(role, "user")) {
        m->role = HX_ROLE_USER;
        rc = oa_content(content, path, line, f, m, false, err, errlen);
    } else if (!strcmp(role, "assistant")) {
        m->role = HX_ROLE_ASSISTANT;
        const json_t *rsn = json_object_get(j, "reasoning_content");
        rc = ENG_OK;
        if (json_is_string(rsn) && json_string_length(rsn) > 0) {
            hx_block b;
            if (hx_block_init(&b, HX_BLOCK_THINKING, json_string_value(rsn), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
            if (hx_message_push_block(m, &b)) {
                hx_block_free(&b);
                return ENG_ERR_NOMEM;
            }
        }
        const json_t *calls = json_object_get(j, "tool_calls");
        if (!rc) rc = oa_content(content, path, line, f, m, json_array_size(calls) > 0, err, errlen);
        if (!rc && calls && !json_is_null(calls)) {
            if (!json_is_array(calls)) {
                hx_imp_fieldf(f, "%s.tool_calls", field);
                hx_errf_at(err, errlen, path, line, f, "expected an array");
                rc = ENG_ERR_FORMAT;
            }
            for (size_t i = 0; !rc && i < json_array_size(calls); i++) {
                const json_t *c = json_array_get(calls, i);
                const json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
                const char *id = json_is_object(c) ? json_string_value(json_object_get(c, "id")) : NULL;
                const char *name = json_is_object(fn) ? json_string_value(json_object_get(fn, "name")) : NULL;
                const json_t *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
                hx_imp_fieldf(f, "%s.tool_calls[%zu]", field, i);
                if (!id || !name) {
                    char g[HX_IMP_FIELD_MAX];
                    hx_imp_fieldf(g, "%s.%s", f, !json_is_object(c) ? "" : !id ? "id" : "function.name");
                    if (!json_is_object(c)) hx_imp_fieldf(g, "%s", f);
                    hx_errf_at(err, errlen, path, line, g, !json_is_object(c) ? "expected a tool call object" : "missing or not a string");
                    rc = ENG_ERR_FORMAT;
                    break;
                }
                char *input = NULL;
                if (json_is_object(args)) input = hx_json_canonical(args);
                else if (!args || json_is_null(args) || (json_is_string(args) && json_string_length(args) == 0)) input = hx_strdup("{}");
                else if (json_is_string(args)) {
                    json_error_t je;
                    json_t *a = json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, &je);
                    if (json_is_object(a)) input = hx_json_canonical(a);
                    json_decref(a);
                    if (!input) {
                        char g[HX_IMP_FIELD_MAX];
                        hx_imp_fieldf(g, "%s.function.arguments", f);
                        hx_errf_at(err, errlen, path, line, g, "not a JSON object");
                        rc = ENG_ERR_FORMAT;
                        break;
                    }
                } else {
                    char g[HX_IMP_FIELD_MAX];
                    hx_imp_fieldf(g, "%s.function.arguments", f);
                    hx_errf_at(err, errlen, path, line, g, "expected a JSON object or a string holding one");
                    rc = ENG_ERR_FORMAT;
                    break;
                }
                hx_block b;
                if (!input || hx_block_init(&b, HX_BLOCK_TOOL_USE, "", id, name, input, false)) rc = ENG_ERR_NOMEM;
                else if (hx_message_push_block(m, &b)) {
                    hx_block_free(&b);
                    rc = ENG_ERR_NOMEM;
                }
                free(input);
            }
        }
    } else if (!strcmp(role, "tool")) {
        m->role = HX_ROLE_TOOL;
        const char *id = json_string_value(json_object_get(j, "tool_call_id"));
        const json_t *ids = json_object_get(j, "tool_call_ids"); /* SWE-agent */
        if (!id && json_is_array(ids)) id = json_string_value(json_array_get(ids, 0));
        if (!id) {
            hx_imp_fieldf(f, "%s.tool_call_id", field);
            hx_errf_at(err, errlen, path, line, f, "missing or not a string");
            return ENG_ERR_FORMAT;
        }
        char *text = NULL;
        hx_imp_fieldf(f, "%s.content", field);
        if ((rc = oa_flat(content, path, line, f, &text, err, errlen))) return rc;
        hx_block b;
        rc = hx_block_init(&b, HX_BLOCK_TOOL_RESULT, text, id, NULL, NULL, false);
        free(text);
        if (!rc && (rc = hx_message_push_block(m, &b))) hx_block_free(&b);
    } else {
        hx_imp_fieldf(f, "%s.role", field);
        hx_errf_at(err, errlen, path, line, f, "unknown role \"%s\" (expected system, developer, user, assistant or tool)", role);
        return ENG_ERR_FORMAT;
    }
    if (rc) hx_message_free(m);
    return rc;
}

/* Leading system messages become system blocks (appended to q->system). */
int hx_imp_system_to_blocks(hx_request *q, hx_message *m) {
    hx_block *nb = realloc(q->system, (size_t)(q->n_system + m->n_blocks + 1) * sizeof *nb);
    if (!nb) return ENG_ERR_NOMEM;
    q->system = nb;
    for (int32_t i = 0; i < m->n_blocks; i++) {
        m->blocks[i].type = HX_BLOCK_TEXT; /* images in a system prompt keep their placeholder text */
        q->system[q->n_system++] = m->blocks[i];
    }
    free(m->blocks);
    memset(m, 0, sizeof *m);
    return ENG_OK;
}

static int openai_request(json_t *j, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    char f[HX_IMP_FIELD_MAX];
    int rc;
    json_t *msgs = json_object_get(j, "messages");
    if (!json_is_array(msgs)) {
        hx_errf_at(err, errlen, path, line, "messages", msgs ? "expected an array" : "missing");
        return ENG_ERR_FORMAT;
    }
    if ((rc = hx_tools_from_json(json_object_get(j, "tools"), path, line, "tools", &q->tools, &q->n_tools, err, errlen)))
        goto fail;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        hx_message m;
        bool sys;
        hx_imp_fieldf(f, "messages[%zu]", i);
        if ((rc = hx_imp_openai_message(json_array_get(msgs, i), path, line, f, &m, &sys, err, errlen))) goto fail;
        rc = (sys && q->n_messages == 0) ? hx_imp_system_to_blocks(q, &m) : hx_imp_push_msg(q, &m);
        if (rc) {
            hx_message_free(&m);
            goto fail;
        }
    }
    return ENG_OK;
fail:
    hx_request_free(q);
    return rc;
}

static int openai_import(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                         int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    return hx_imp_bodies(o, path, data, n, out, n_skipped, openai_request, err, errlen);
}

const hx_importer hx_importer_openai = {
    .name = "openai",
    .help = "JSONL of chat-completions request bodies (one model call per line)",
    .import = openai_import,
};
