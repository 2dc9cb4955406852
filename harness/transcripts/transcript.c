/*
 * harness/transcripts/transcript.c: the transcript model: requests, messages,
 * blocks and tools, and how they are built, copied, compared and freed
 * (transcript.h). Reading is transcript_read.c, writing transcript_write.c.
 *
 * Invariants: every structure owns its strings; copies are deep; *_free
 * accept NULL and zeroed values and leave them zeroed.
 */
#include "transcript.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "status.h"
#include "str.h"

const char *hx_role_name(hx_role r) {
    switch (r) {
    case HX_ROLE_SYSTEM:    return "system";
    case HX_ROLE_USER:      return "user";
    case HX_ROLE_ASSISTANT: return "assistant";
    case HX_ROLE_TOOL:      return "tool";
    }
    return "?";
}

const char *hx_block_type_name(hx_block_type t) {
    switch (t) {
    case HX_BLOCK_TEXT:        return "text";
    case HX_BLOCK_THINKING:    return "thinking";
    case HX_BLOCK_TOOL_USE:    return "tool_use";
    case HX_BLOCK_TOOL_RESULT: return "tool_result";
    case HX_BLOCK_IMAGE:       return "image";
    }
    return "?";
}

hx_request_kind hx_request_kind_of(const hx_request *r) {
    if (r->tokens) return HX_REQUEST_TOKENS;
    if (r->prompt) return HX_REQUEST_PROMPT;
    return HX_REQUEST_MESSAGES;
}

// ----------------------------------------------------------------------------
// Structure helpers: init, copy, free, compare

int hx_block_init(hx_block *b, hx_block_type type, const char *text, const char *id,
                  const char *name, const char *input, bool is_error) {
    memset(b, 0, sizeof *b);
    b->type = type;
    b->is_error = is_error;
    b->text = hx_strdup(text ? text : "");
    if (!b->text) goto nomem;
    if (id && !(b->id = hx_strdup(id))) goto nomem;
    if (name && !(b->name = hx_strdup(name))) goto nomem;
    if (type == HX_BLOCK_TOOL_USE) {
        const char *in = input ? input : "{}";
        json_error_t je;
        json_t *j = json_loadb(in, strlen(in), JSON_REJECT_DUPLICATES, &je);
        if (!j || !json_is_object(j)) {
            json_decref(j);
            hx_block_free(b);
            return ENG_ERR_FORMAT;
        }
        b->input = hx_json_canonical(j);
        json_decref(j);
        if (!b->input) goto nomem;
    } else if (input && !(b->input = hx_strdup(input))) {
        goto nomem;
    }
    return ENG_OK;
nomem:
    hx_block_free(b);
    return ENG_ERR_NOMEM;
}

void hx_block_free(hx_block *b) {
    if (!b) return;
    free(b->text);
    free(b->id);
    free(b->name);
    free(b->input);
    memset(b, 0, sizeof *b);
}

int hx_block_copy(hx_block *dst, const hx_block *src) {
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    dst->is_error = src->is_error;
    if (!(dst->text = hx_strdup(src->text ? src->text : ""))) goto nomem;
    if (src->id && !(dst->id = hx_strdup(src->id))) goto nomem;
    if (src->name && !(dst->name = hx_strdup(src->name))) goto nomem;
    if (src->input && !(dst->input = hx_strdup(src->input))) goto nomem;
    return ENG_OK;
nomem:
    hx_block_free(dst);
    return ENG_ERR_NOMEM;
}

void hx_message_free(hx_message *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_blocks; i++) hx_block_free(&m->blocks[i]);
    free(m->blocks);
    memset(m, 0, sizeof *m);
}

int hx_message_copy(hx_message *dst, const hx_message *src) {
    memset(dst, 0, sizeof *dst);
    dst->role = src->role;
    if (src->n_blocks == 0) return ENG_OK;
    dst->blocks = calloc((size_t)src->n_blocks, sizeof *dst->blocks);
    if (!dst->blocks) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < src->n_blocks; i++) {
        if (hx_block_copy(&dst->blocks[i], &src->blocks[i]) != ENG_OK) {
            hx_message_free(dst);
            return ENG_ERR_NOMEM;
        }
        dst->n_blocks = i + 1;
    }
    return ENG_OK;
}

int hx_message_push_block(hx_message *m, hx_block *b) {
    hx_block *nb = realloc(m->blocks, (size_t)(m->n_blocks + 1) * sizeof *nb);
    if (!nb) return ENG_ERR_NOMEM;
    m->blocks = nb;
    m->blocks[m->n_blocks++] = *b;
    memset(b, 0, sizeof *b);
    return ENG_OK;
}

int hx_request_push_message(hx_request *q, hx_message *m) {
    hx_message *nm = realloc(q->messages, (size_t)(q->n_messages + 1) * sizeof *nm);
    if (!nm) return ENG_ERR_NOMEM;
    q->messages = nm;
    nm[q->n_messages++] = *m;
    memset(m, 0, sizeof *m);
    return ENG_OK;
}

static bool str_eq(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

bool hx_block_equal(const hx_block *a, const hx_block *b) {
    return a->type == b->type && a->is_error == b->is_error && str_eq(a->text, b->text) &&
           str_eq(a->id, b->id) && str_eq(a->name, b->name) && str_eq(a->input, b->input);
}

bool hx_message_equal(const hx_message *a, const hx_message *b) {
    if (a->role != b->role || a->n_blocks != b->n_blocks) return false;
    for (int32_t i = 0; i < a->n_blocks; i++)
        if (!hx_block_equal(&a->blocks[i], &b->blocks[i])) return false;
    return true;
}

void hx_tool_free(hx_tool *t) {
    if (!t) return;
    free(t->name);
    free(t->description);
    free(t->schema);
    memset(t, 0, sizeof *t);
}

int hx_tool_copy(hx_tool *dst, const hx_tool *src) {
    memset(dst, 0, sizeof *dst);
    dst->name = hx_strdup(src->name ? src->name : "");
    dst->description = hx_strdup(src->description ? src->description : "");
    dst->schema = hx_strdup(src->schema ? src->schema : "{}");
    if (!dst->name || !dst->description || !dst->schema) {
        hx_tool_free(dst);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

void hx_request_free(hx_request *r) {
    if (!r) return;
    free(r->session);
    for (int32_t i = 0; i < r->n_system; i++) hx_block_free(&r->system[i]);
    free(r->system);
    for (int32_t i = 0; i < r->n_tools; i++) hx_tool_free(&r->tools[i]);
    free(r->tools);
    for (int32_t i = 0; i < r->n_messages; i++) hx_message_free(&r->messages[i]);
    free(r->messages);
    hx_message_free(&r->response);
    free(r->prompt);
    free(r->tokens);
    free(r->response_text);
    hx_call_usage_free(&r->usage);
    free(r->notes);
    free(r->served);
    memset(r, 0, sizeof *r);
}

void hx_call_usage_free(hx_call_usage *u) {
    if (!u) return;
    free(u->counted_with);
    memset(u, 0, sizeof *u);
}

int hx_call_usage_copy(hx_call_usage *dst, const hx_call_usage *src) {
    *dst = *src;
    dst->counted_with = NULL;
    if (src->counted_with && !(dst->counted_with = hx_strdup(src->counted_with))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

int64_t hx_call_usage_total(const hx_call_usage *u) {
    return u && u->present ? u->input + u->cache_read + u->cache_creation : -1;
}

int hx_request_copy(hx_request *dst, const hx_request *src) {
    memset(dst, 0, sizeof *dst);
    dst->turn = src->turn;
    dst->line = src->line;
    dst->response.role = src->response.role;
    if (!(dst->session = hx_strdup(src->session ? src->session : ""))) goto nomem;
    if (src->n_system) {
        if (!(dst->system = calloc((size_t)src->n_system, sizeof *dst->system))) goto nomem;
        for (int32_t i = 0; i < src->n_system; i++, dst->n_system++)
            if (hx_block_copy(&dst->system[i], &src->system[i])) goto nomem;
    }
    if (src->n_tools) {
        if (!(dst->tools = calloc((size_t)src->n_tools, sizeof *dst->tools))) goto nomem;
        for (int32_t i = 0; i < src->n_tools; i++, dst->n_tools++)
            if (hx_tool_copy(&dst->tools[i], &src->tools[i])) goto nomem;
    }
    if (src->n_messages) {
        if (!(dst->messages = calloc((size_t)src->n_messages, sizeof *dst->messages))) goto nomem;
        for (int32_t i = 0; i < src->n_messages; i++, dst->n_messages++)
            if (hx_message_copy(&dst->messages[i], &src->messages[i])) goto nomem;
    }
    if (hx_message_copy(&dst->response, &src->response)) goto nomem;
    if (src->prompt && !(dst->prompt = hx_strdup(src->prompt))) goto nomem;
    if (src->response_text && !(dst->response_text = hx_strdup(src->response_text))) goto nomem;
    if (src->tokens) {
        size_t nb = (size_t)(src->n_tokens > 0 ? src->n_tokens : 1) * sizeof(int32_t);
        if (!(dst->tokens = malloc(nb))) goto nomem;
        memcpy(dst->tokens, src->tokens, (size_t)src->n_tokens * sizeof(int32_t));
        dst->n_tokens = src->n_tokens;
    }
    if (hx_call_usage_copy(&dst->usage, &src->usage)) goto nomem;
    if (src->notes && !(dst->notes = hx_strdup(src->notes))) goto nomem;
    if (src->served && !(dst->served = hx_strdup(src->served))) goto nomem;
    return ENG_OK;
nomem:
    hx_request_free(dst);
    return ENG_ERR_NOMEM;
}

bool hx_tool_equal(const hx_tool *a, const hx_tool *b) {
    return str_eq(a->name, b->name) && str_eq(a->description, b->description) && str_eq(a->schema, b->schema);
}

bool hx_request_equal(const hx_request *a, const hx_request *b) {
    if (!str_eq(a->session, b->session) || a->turn != b->turn || a->n_system != b->n_system ||
        a->n_tools != b->n_tools || a->n_messages != b->n_messages || a->n_tokens != b->n_tokens ||
        !str_eq(a->prompt, b->prompt) || !str_eq(a->response_text, b->response_text) ||
        (a->tokens == NULL) != (b->tokens == NULL) || !hx_message_equal(&a->response, &b->response))
        return false;
    for (int32_t i = 0; i < a->n_system; i++)
        if (!hx_block_equal(&a->system[i], &b->system[i])) return false;
    for (int32_t i = 0; i < a->n_tools; i++)
        if (!hx_tool_equal(&a->tools[i], &b->tools[i])) return false;
    for (int32_t i = 0; i < a->n_messages; i++)
        if (!hx_message_equal(&a->messages[i], &b->messages[i])) return false;
    if (a->n_tokens && memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t)) != 0) return false;
    return true;
}

void hx_transcript_free(hx_transcript *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n; i++) hx_request_free(&t->reqs[i]);
    free(t->reqs);
    free(t->path);
    free(t->header);
    memset(t, 0, sizeof *t);
}

int hx_transcript_push(hx_transcript *t, hx_request *r) {
    if (t->n == INT32_MAX) return ENG_ERR_RANGE;
    /* capacity: the power of two >= n + 1; realloc to an unchanged size is
     * cheap, and this stays correct for any malloc'd reqs array */
    size_t cap = 1;
    while (cap < (size_t)t->n + 1) cap *= 2;
    hx_request *nr = realloc(t->reqs, cap * sizeof *nr);
    if (!nr) return ENG_ERR_NOMEM;
    t->reqs = nr;
    t->reqs[t->n++] = *r;
    memset(r, 0, sizeof *r);
    return ENG_OK;
}
