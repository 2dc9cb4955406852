/*
 * harness/transcripts/transcript_write.c: transcripts written as canonical
 * lines (docs/transcripts.md): compact JSON, keys in a fixed documented
 * order, tool inputs and schemas as canonical JSON (sorted keys); v2 writes a
 * request that extends its session's previous one as a compact line.
 * Invariants: read(write(t)) has the same structures as t, and
 * write(read(write(t))) is byte-identical to write(t); files are written
 * atomically (hx_write_atomic).
 */
#include "transcript.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "jsonl.h"
#include "status.h"
#include "str.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Writing: canonical lines (fixed key order, compact, canonical nested JSON)

/* json_string fails on invalid UTF-8: every builder below returns NULL then. */
static json_t *block_to_json(const hx_block *b) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = json_object_set_new(o, "type", json_string(hx_block_type_name(b->type)));
    switch (b->type) {
    case HX_BLOCK_TEXT:
        bad |= json_object_set_new(o, "text", json_string(b->text));
        break;
    case HX_BLOCK_THINKING:
        bad |= json_object_set_new(o, "thinking", json_string(b->text));
        break;
    case HX_BLOCK_TOOL_USE: {
        json_error_t je;
        const char *in = b->input ? b->input : "{}";
        bad |= json_object_set_new(o, "id", json_string(b->id ? b->id : ""));
        bad |= json_object_set_new(o, "name", json_string(b->name ? b->name : ""));
        bad |= json_object_set_new(o, "input", json_loadb(in, strlen(in), 0, &je));
        break;
    }
    case HX_BLOCK_TOOL_RESULT:
        bad |= json_object_set_new(o, "tool_use_id", json_string(b->id ? b->id : ""));
        bad |= json_object_set_new(o, "content", json_string(b->text));
        if (b->is_error) bad |= json_object_set_new(o, "is_error", json_true());
        break;
    case HX_BLOCK_IMAGE:
        bad |= json_object_set_new(o, "placeholder", json_string(b->text));
        break;
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *blocks_to_json(const hx_block *bs, int32_t n) {
    json_t *a = json_array();
    if (!a) return NULL;
    for (int32_t i = 0; i < n; i++) {
        if (json_array_append_new(a, block_to_json(&bs[i]))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *tools_to_json(const hx_tool *tools, int32_t n) {
    json_t *ta = json_array();
    for (int32_t i = 0; ta && i < n; i++) {
        const hx_tool *t = &tools[i];
        json_t *to = json_object();
        json_error_t je;
        const char *sc = t->schema ? t->schema : "{}";
        int b2 = !to;
        if (to) {
            b2 |= json_object_set_new(to, "name", json_string(t->name ? t->name : ""));
            b2 |= json_object_set_new(to, "description", json_string(t->description ? t->description : ""));
            b2 |= json_object_set_new(to, "input_schema", json_loadb(sc, strlen(sc), 0, &je));
        }
        if (b2 || json_array_append_new(ta, to)) {
            if (!b2) to = NULL;
            json_decref(to);
            json_decref(ta);
            ta = NULL;
        }
    }
    return ta;
}

static json_t *messages_to_json(const hx_message *ms, int32_t from, int32_t to) {
    json_t *ma = json_array();
    for (int32_t i = from; ma && i < to; i++) {
        json_t *mo = json_object();
        int b2 = !mo;
        if (mo) {
            b2 |= json_object_set_new(mo, "role", json_string(hx_role_name(ms[i].role)));
            b2 |= json_object_set_new(mo, "content", blocks_to_json(ms[i].blocks, ms[i].n_blocks));
        }
        if (b2 || json_array_append_new(ma, mo)) {
            if (!b2) mo = NULL;
            json_decref(mo);
            json_decref(ma);
            ma = NULL;
        }
    }
    return ma;
}

static bool tools_equal(const hx_request *a, const hx_request *b) {
    if (a->n_tools != b->n_tools) return false;
    for (int32_t i = 0; i < a->n_tools; i++)
        if (!hx_tool_equal(&a->tools[i], &b->tools[i])) return false;
    return true;
}

/* How r extends prev (both messages requests): the number of r's messages
 * rebuilt from prev (its messages, plus its response when *with_response),
 * or -1 when r does not start with prev's messages. */
static int32_t extends_prev(const hx_request *prev, const hx_request *r, bool *with_response) {
    *with_response = false;
    if (r->n_messages < prev->n_messages) return -1;
    for (int32_t i = 0; i < prev->n_messages; i++)
        if (!hx_message_equal(&prev->messages[i], &r->messages[i])) return -1;
    int32_t k = prev->n_messages;
    if (prev->response.n_blocks > 0 && r->n_messages > k && r->messages[k].role == HX_ROLE_ASSISTANT) {
        hx_message resp = prev->response;
        resp.role = HX_ROLE_ASSISTANT;
        if (hx_message_equal(&resp, &r->messages[k])) {
            *with_response = true;
            return k + 1;
        }
    }
    return k;
}

/* The JSON object of one line. version 1: self-contained; version 2:
 * compact when prev (the session's previous request, or NULL) allows it. */
static json_t *request_to_json(const hx_request *r, const hx_request *prev, int version) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = json_object_set_new(o, "v", json_integer(version));
    bad |= json_object_set_new(o, "session", json_string(r->session ? r->session : ""));
    bad |= json_object_set_new(o, "turn", json_integer(r->turn));
    hx_request_kind kind = hx_request_kind_of(r);
    if (kind == HX_REQUEST_MESSAGES) {
        bool with_resp = false;
        int32_t from = version == 2 && prev && hx_request_kind_of(prev) == HX_REQUEST_MESSAGES
                           ? extends_prev(prev, r, &with_resp) : -1;
        if (from >= 0) {
            bad |= json_object_set_new(o, "prev", json_integer(prev->turn));
            if (!with_resp && prev->response.n_blocks > 0) bad |= json_object_set_new(o, "prev_response", json_false());
            bool same_sys = r->n_system == prev->n_system;
            for (int32_t i = 0; same_sys && i < r->n_system; i++) same_sys = hx_block_equal(&r->system[i], &prev->system[i]);
            if (!same_sys && r->n_system == prev->n_system) {
                json_t *sa = json_array();
                for (int32_t i = 0; sa && i < r->n_system; i++) {
                    json_t *e = hx_block_equal(&r->system[i], &prev->system[i]) ? json_null() : block_to_json(&r->system[i]);
                    if (json_array_append_new(sa, e)) {
                        json_decref(sa);
                        sa = NULL;
                    }
                }
                bad |= json_object_set_new(o, "system", sa);
            } else if (!same_sys) {
                bad |= json_object_set_new(o, "system", blocks_to_json(r->system, r->n_system));
            }
            if (!tools_equal(r, prev)) bad |= json_object_set_new(o, "tools", tools_to_json(r->tools, r->n_tools));
            bad |= json_object_set_new(o, "append", messages_to_json(r->messages, from, r->n_messages));
        } else {
            if (r->n_system) bad |= json_object_set_new(o, "system", blocks_to_json(r->system, r->n_system));
            if (r->n_tools) bad |= json_object_set_new(o, "tools", tools_to_json(r->tools, r->n_tools));
            bad |= json_object_set_new(o, "messages", messages_to_json(r->messages, 0, r->n_messages));
        }
        json_t *ro = json_object();
        if (ro) bad |= json_object_set_new(ro, "content", blocks_to_json(r->response.blocks, r->response.n_blocks));
        bad |= json_object_set_new(o, "response", ro);
    } else {
        if (kind == HX_REQUEST_PROMPT) {
            bad |= json_object_set_new(o, "prompt", json_string(r->prompt));
        } else {
            json_t *ta = json_array();
            for (int32_t i = 0; ta && i < r->n_tokens; i++)
                if (json_array_append_new(ta, json_integer(r->tokens[i]))) {
                    json_decref(ta);
                    ta = NULL;
                }
            bad |= json_object_set_new(o, "tokens", ta);
        }
        if (r->response_text) bad |= json_object_set_new(o, "response", json_string(r->response_text));
    }
    if (version == 2 && r->usage.present) {
        const hx_call_usage *u = &r->usage;
        json_t *uo = json_object();
        bad |= !uo;
        if (uo) {
            bad |= json_object_set_new(uo, "input_tokens", json_integer(u->input));
            bad |= json_object_set_new(uo, "cache_read_input_tokens", json_integer(u->cache_read));
            bad |= json_object_set_new(uo, "cache_creation_input_tokens", json_integer(u->cache_creation));
            bad |= json_object_set_new(uo, "total", json_integer(hx_call_usage_total(u)));
            if (u->prompt_tokens >= 0 && u->counted_with) {
                bad |= json_object_set_new(uo, "prompt_tokens", json_integer(u->prompt_tokens));
                bad |= json_object_set_new(uo, "counted_with", json_string(u->counted_with));
                int64_t tot = hx_call_usage_total(u);
                /* three decimals (the line is dumped with JSON_REAL_PRECISION) */
                if (tot > 0) bad |= json_object_set_new(uo, "ratio", json_real((double)u->prompt_tokens / (double)tot));
            }
            bad |= json_object_set_new(o, "usage", uo);
        }
    }
    if (version == 2 && r->notes) {
        json_error_t je;
        bad |= json_object_set_new(o, "notes", json_loadb(r->notes, strlen(r->notes), 0, &je));
    }
    if (version == 2 && r->served) {
        json_error_t je;
        bad |= json_object_set_new(o, "served", json_loadb(r->served, strlen(r->served), 0, &je));
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A line's text: compact JSON; a usage ratio with 3 significant decimals.
 * Reals elsewhere (tool inputs, schemas) keep jansson's full precision. */
static char *line_text(json_t *o) {
    json_t *u = json_object_get(o, "usage");
    json_t *ratio = u ? json_object_get(u, "ratio") : NULL;
    if (!ratio) return json_dumps(o, JSON_COMPACT);
    char num[32];
    snprintf(num, sizeof num, "%.3f", json_real_value(ratio));
    json_object_del(u, "ratio");
    char *s = json_dumps(o, JSON_COMPACT);
    if (!s) return NULL;
    /* the usage object is the last-but-notes member: re-insert "ratio" before its closing brace */
    char *uat = strstr(s, ",\"usage\":{");
    char *close = uat ? strchr(uat, '}') : NULL;
    if (!close) return s;
    size_t n = strlen(s), add = strlen(",\"ratio\":") + strlen(num);
    char *t = malloc(n + add + 1);
    if (!t) {
        free(s);
        return NULL;
    }
    size_t head = (size_t)(close - s);
    memcpy(t, s, head);
    snprintf(t + head, add + 1, ",\"ratio\":%s", num);
    memcpy(t + head + add, close, n - head + 1);
    free(s);
    return t;
}

/* {"v":2,"header":HEADER} (malloc'd), or NULL when header is not a JSON object (or out of memory). */
static char *header_line(const char *header) {
    json_error_t je;
    json_t *h = json_loadb(header, strlen(header), 0, &je);
    json_t *o = json_is_object(h) ? json_pack("{s:i,s:o}", "v", 2, "header", h) : (json_decref(h), NULL);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

int hx_request_serialize_line(const hx_request *r, const hx_request *prev, const char *header, char **out,
                              size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    if (!r) {
        if (!header || !(*out = header_line(header))) {
            eng_errf(err, errlen, "the transcript header is not a JSON object");
            return ENG_ERR_FORMAT;
        }
        *n = strlen(*out);
        return ENG_OK;
    }
    json_t *o = request_to_json(r, prev, 2);
    char *s = o ? line_text(o) : NULL;
    json_decref(o);
    if (!s) {
        eng_errf(err, errlen, "request (session \"%s\", turn %d): cannot encode as JSON (invalid UTF-8 or out of "
                 "memory)", r->session ? r->session : "", r->turn);
        return ENG_ERR_FORMAT;
    }
    *out = s;
    *n = strlen(s);
    return ENG_OK;
}

int hx_transcript_serialize_version(const hx_transcript *t, int version, char **out, size_t *n, char *err,
                                    size_t errlen) {
    *out = NULL;
    *n = 0;
    if (version != 1 && version != 2) {
        eng_errf(err, errlen, "transcript format version %d is not 1 or 2", version);
        return ENG_ERR_ARG;
    }
    eng_buf b = {0};
    hx_strmap last = {0};
    int rc = ENG_OK;
    if (version == 2 && t->header) {
        char *s = header_line(t->header);
        if (!s) {
            eng_errf(err, errlen, "the transcript header is not a JSON object");
            return ENG_ERR_FORMAT;
        }
        rc = eng_buf_append(&b, s, strlen(s));
        free(s);
        if (rc || eng_buf_append(&b, "\n", 1)) {
            eng_buf_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    for (int32_t i = 0; i < t->n && !rc; i++) {
        const hx_request *r = &t->reqs[i];
        int64_t p = -1;
        if (!hx_strmap_get(&last, r->session ? r->session : "", &p)) p = -1;
        json_t *o = request_to_json(r, p >= 0 ? &t->reqs[p] : NULL, version);
        char *s = o ? line_text(o) : NULL;
        json_decref(o);
        if (!s) {
            eng_errf(err, errlen, "request %d (session \"%s\", turn %d): cannot encode as JSON "
                     "(invalid UTF-8 or out of memory)", i, r->session ? r->session : "", r->turn);
            rc = ENG_ERR_FORMAT;
            break;
        }
        rc = eng_buf_append(&b, s, strlen(s));
        free(s);
        if (rc || (rc = eng_buf_append(&b, "\n", 1)) || (rc = hx_strmap_put(&last, r->session ? r->session : "", i)))
            break;
    }
    hx_strmap_free(&last);
    if (rc) {
        eng_buf_free(&b);
        return rc;
    }
    if (!b.data && !(b.data = hx_strdup(""))) return ENG_ERR_NOMEM;
    *out = b.data;
    *n = b.len;
    return ENG_OK;
}

int hx_transcript_serialize(const hx_transcript *t, char **out, size_t *n, char *err, size_t errlen) {
    return hx_transcript_serialize_version(t, 2, out, n, err, errlen);
}

int hx_transcript_write_version(const char *path, const hx_transcript *t, int version, char *err, size_t errlen) {
    int rc = hx_output_check(path, err, errlen);
    if (rc) return rc;
    char *data;
    size_t n;
    if ((rc = hx_transcript_serialize_version(t, version, &data, &n, err, errlen))) return rc;
    rc = hx_write_atomic(path, data, n, err, errlen);
    free(data);
    return rc;
}

int hx_transcript_write(const char *path, const hx_transcript *t, char *err, size_t errlen) {
    return hx_transcript_write_version(path, t, 2, err, errlen);
}
