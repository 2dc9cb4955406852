/*
 * harness/transcripts/template.c: chatml, llama2, llama3 and raw chat templates with a
 * span map (see template.h; every rule is spelled out in docs/transcripts.md).
 *
 * Rendering is a single pass through an emitter that appends text and
 * records which part of the request each piece renders. Invariants:
 *   - spans are contiguous, non-empty, ordered and cover the whole text;
 *     neighbouring pieces with the same (part, index, block) are merged;
 *   - a message renders the same whatever follows it, and an assistant
 *     message renders as generation prompt + response rendering, which is
 *     what gives the prefix property of template.h;
 *   - tool definitions and tool calls are canonical JSON, so the text is a
 *     pure function of the request.
 */
#include "template.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "util.h"

// ----------------------------------------------------------------------------
// The emitter: text + spans

typedef struct emitter {
    eng_buf  buf;
    hx_span *spans;
    int32_t  n, cap;
    int      rc;  /* first failure (ENG_ERR_NOMEM), sticky */
} emitter;

static void emit(emitter *e, hx_part part, int32_t index, int32_t block, const char *s, size_t n) {
    if (e->rc || n == 0) return;
    size_t begin = e->buf.len;
    if (eng_buf_append(&e->buf, s, n)) {
        e->rc = ENG_ERR_NOMEM;
        return;
    }
    if (e->n > 0) {
        hx_span *last = &e->spans[e->n - 1];
        if (last->part == part && last->index == index && last->block == block) {
            last->end = e->buf.len;
            return;
        }
    }
    if (e->n == e->cap) {
        int32_t ncap = e->cap ? e->cap * 2 : 32;
        hx_span *ns = realloc(e->spans, (size_t)ncap * sizeof *ns);
        if (!ns) {
            e->rc = ENG_ERR_NOMEM;
            return;
        }
        e->spans = ns;
        e->cap = ncap;
    }
    e->spans[e->n++] = (hx_span){begin, e->buf.len, part, index, block};
}

static void emits(emitter *e, hx_part part, int32_t index, int32_t block, const char *s) {
    emit(e, part, index, block, s, strlen(s));
}

static int finish(emitter *e, hx_render *out) {
    memset(out, 0, sizeof *out);
    if (e->rc == ENG_OK && !e->buf.data && eng_buf_append(&e->buf, "", 0)) e->rc = ENG_ERR_NOMEM;
    if (e->rc == ENG_OK && !e->buf.data) {
        e->buf.data = malloc(1);
        if (!e->buf.data) e->rc = ENG_ERR_NOMEM;
        else e->buf.data[0] = '\0';
    }
    if (e->rc) {
        eng_buf_free(&e->buf);
        free(e->spans);
        return e->rc;
    }
    out->text = e->buf.data;
    out->len = e->buf.len;
    out->spans = e->spans;
    out->n_spans = e->n;
    return ENG_OK;
}

void hx_render_free(hx_render *r) {
    if (!r) return;
    free(r->text);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

// ----------------------------------------------------------------------------
// Names and guessing

static const char *const k_names[HX_TEMPLATE_COUNT] = {"chatml", "llama2", "llama3", "raw"};

int hx_template_from_name(const char *name) {
    if (!name) return ENG_ERR_NOT_FOUND;
    for (int i = 0; i < HX_TEMPLATE_COUNT; i++)
        if (!strcmp(name, k_names[i])) return i;
    return ENG_ERR_NOT_FOUND;
}

const char *hx_template_name(hx_template t) {
    return ((int)t >= 0 && (int)t < HX_TEMPLATE_COUNT) ? k_names[t] : "?";
}

hx_template hx_template_guess(const char *arch, const char *chat_template) {
    (void)arch;
    if (chat_template) {
        if (strstr(chat_template, "<|im_start|>")) return HX_TEMPLATE_CHATML;
        if (strstr(chat_template, "<|start_header_id|>")) return HX_TEMPLATE_LLAMA3;
        if (strstr(chat_template, "[INST]")) return HX_TEMPLATE_LLAMA2;
    }
    return HX_TEMPLATE_CHATML;
}

// ----------------------------------------------------------------------------
// Pieces shared by the templates: tools section, blocks

static const char k_tools_intro_tagged[] =
    "# Tools\n\n"
    "You may call the functions described below. Each line inside <tools></tools> is the JSON "
    "signature of one function:\n<tools>\n";
static const char k_tools_outro_tagged[] =
    "</tools>\n\n"
    "To call a function, write one <tool_call></tool_call> block per call holding a JSON object "
    "with the keys \"name\" and \"arguments\", for example:\n"
    "<tool_call>\n{\"name\":\"NAME\",\"arguments\":{}}\n</tool_call>";
static const char k_tools_intro_llama3[] =
    "# Tools\n\n"
    "The functions below are available, one JSON signature per line. To call one, reply with only "
    "a JSON object of the form {\"name\": NAME, \"parameters\": ARGUMENTS}.\n\n";

/* {"function":{"description":D,"name":N,"parameters":S},"type":"function"} (canonical). */
static char *tool_json(const hx_tool *t) {
    json_error_t je;
    const char *sc = t->schema ? t->schema : "{}";
    json_t *params = json_loadb(sc, strlen(sc), JSON_DECODE_ANY, &je);
    if (!params) params = json_object();
    json_t *fn = json_object();
    json_t *o = json_object();
    char *s = NULL;
    if (params && fn && o && !json_object_set_new(fn, "name", json_string(t->name ? t->name : "")) &&
        !json_object_set_new(fn, "description", json_string(t->description ? t->description : "")) &&
        !json_object_set(fn, "parameters", params) && !json_object_set_new(o, "type", json_string("function")) &&
        !json_object_set(o, "function", fn))
        s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(params);
    json_decref(fn);
    json_decref(o);
    return s;
}

static void emit_tools(emitter *e, hx_template t, const hx_request *r) {
    emits(e, HX_PART_TOOLS, -1, -1, t == HX_TEMPLATE_LLAMA3 ? k_tools_intro_llama3 : k_tools_intro_tagged);
    for (int32_t i = 0; i < r->n_tools && !e->rc; i++) {
        char *s = tool_json(&r->tools[i]);
        if (!s) {
            e->rc = ENG_ERR_NOMEM;
            return;
        }
        emits(e, HX_PART_TOOLS, i, -1, s);
        emits(e, HX_PART_TOOLS, i, -1, "\n");
        free(s);
    }
    if (t != HX_TEMPLATE_LLAMA3) emits(e, HX_PART_TOOLS, -1, -1, k_tools_outro_tagged);
}

/* The JSON string literal of s (with quotes), malloc'd. */
static char *json_quote(const char *s) {
    json_t *j = json_string(s ? s : "");
    char *q = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(j);
    return q;
}

static void emit_block(emitter *e, hx_template t, hx_part part, int32_t index, int32_t bi, const hx_block *b) {
    switch (b->type) {
    case HX_BLOCK_TEXT:
    case HX_BLOCK_IMAGE:
        emits(e, part, index, bi, b->text);
        break;
    case HX_BLOCK_THINKING:
        emits(e, part, index, bi, "<think>\n");
        emits(e, part, index, bi, b->text);
        emits(e, part, index, bi, "\n</think>\n");
        break;
    case HX_BLOCK_TOOL_USE: {
        char *q = json_quote(b->name);
        if (!q) {
            e->rc = ENG_ERR_NOMEM;
            return;
        }
        if (t != HX_TEMPLATE_LLAMA3) emits(e, part, index, bi, "<tool_call>\n");
        emits(e, part, index, bi, "{\"name\":");
        emits(e, part, index, bi, q);
        emits(e, part, index, bi, t == HX_TEMPLATE_LLAMA3 ? ",\"parameters\":" : ",\"arguments\":");
        emits(e, part, index, bi, b->input ? b->input : "{}");
        emits(e, part, index, bi, "}");
        if (t != HX_TEMPLATE_LLAMA3) emits(e, part, index, bi, "\n</tool_call>");
        free(q);
        break;
    }
    case HX_BLOCK_TOOL_RESULT:
        if (t != HX_TEMPLATE_LLAMA3) emits(e, part, index, bi, "<tool_response>\n");
        if (b->is_error) emits(e, part, index, bi, "Error: ");
        emits(e, part, index, bi, b->text);
        if (t != HX_TEMPLATE_LLAMA3) emits(e, part, index, bi, "\n</tool_response>");
        break;
    }
}

/* The blocks of a message or response, separated by "\n" (framing). */
static void emit_blocks(emitter *e, hx_template t, hx_part part, int32_t index, const hx_message *m) {
    for (int32_t b = 0; b < m->n_blocks; b++) {
        if (b > 0) emits(e, part, index, -1, "\n");
        emit_block(e, t, part, index, b, &m->blocks[b]);
    }
}

static bool has_system(const hx_request *r) { return r->n_system > 0 || r->n_tools > 0; }

static void emit_system_body(emitter *e, hx_template t, const hx_request *r) {
    for (int32_t i = 0; i < r->n_system; i++) emits(e, HX_PART_SYSTEM, i, -1, r->system[i].text);
    if (r->n_tools > 0) {
        if (r->n_system > 0) emits(e, HX_PART_TOOLS, -1, -1, "\n\n");
        emit_tools(e, t, r);
    }
}

// ----------------------------------------------------------------------------
// chatml

static const char *chatml_role(const hx_message *m) {
    switch (m->role) {
    case HX_ROLE_SYSTEM:    return "system";
    case HX_ROLE_ASSISTANT: return "assistant";
    default:                return "user";  /* user, and tool results (Qwen style) */
    }
}

static void chatml_prompt(emitter *e, const hx_request *r) {
    if (has_system(r)) {
        emits(e, HX_PART_SYSTEM, -1, -1, "<|im_start|>system\n");
        emit_system_body(e, HX_TEMPLATE_CHATML, r);
        emits(e, HX_PART_SYSTEM, -1, -1, "<|im_end|>\n");
    }
    for (int32_t m = 0; m < r->n_messages; m++) {
        const hx_message *msg = &r->messages[m];
        emits(e, HX_PART_MESSAGE, m, -1, "<|im_start|>");
        emits(e, HX_PART_MESSAGE, m, -1, chatml_role(msg));
        emits(e, HX_PART_MESSAGE, m, -1, "\n");
        emit_blocks(e, HX_TEMPLATE_CHATML, HX_PART_MESSAGE, m, msg);
        emits(e, HX_PART_MESSAGE, m, -1, "<|im_end|>\n");
    }
    emits(e, HX_PART_GEN_PROMPT, -1, -1, "<|im_start|>assistant\n");
}

// ----------------------------------------------------------------------------
// llama3

static const char *llama3_role(const hx_message *m) {
    switch (m->role) {
    case HX_ROLE_SYSTEM:    return "system";
    case HX_ROLE_ASSISTANT: return "assistant";
    case HX_ROLE_TOOL:      return "ipython";
    case HX_ROLE_USER:
        return (m->n_blocks > 0 && m->blocks[0].type == HX_BLOCK_TOOL_RESULT) ? "ipython" : "user";
    }
    return "user";
}

static void llama3_prompt(emitter *e, const hx_request *r) {
    if (has_system(r)) {
        emits(e, HX_PART_SYSTEM, -1, -1, "<|start_header_id|>system<|end_header_id|>\n\n");
        emit_system_body(e, HX_TEMPLATE_LLAMA3, r);
        emits(e, HX_PART_SYSTEM, -1, -1, "<|eot_id|>");
    }
    for (int32_t m = 0; m < r->n_messages; m++) {
        const hx_message *msg = &r->messages[m];
        emits(e, HX_PART_MESSAGE, m, -1, "<|start_header_id|>");
        emits(e, HX_PART_MESSAGE, m, -1, llama3_role(msg));
        emits(e, HX_PART_MESSAGE, m, -1, "<|end_header_id|>\n\n");
        emit_blocks(e, HX_TEMPLATE_LLAMA3, HX_PART_MESSAGE, m, msg);
        emits(e, HX_PART_MESSAGE, m, -1, "<|eot_id|>");
    }
    emits(e, HX_PART_GEN_PROMPT, -1, -1, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// ----------------------------------------------------------------------------
// llama2: [INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] ANSWER </s><s>[INST] USER [/INST]

static void llama2_prompt(emitter *e, const hx_request *r) {
    bool open = false;        /* an [INST] is open (the system section's) */
    bool after_answer = false; /* the previous turn was an assistant answer */
    if (has_system(r)) {
        emits(e, HX_PART_SYSTEM, -1, -1, "[INST] <<SYS>>\n");
        emit_system_body(e, HX_TEMPLATE_LLAMA2, r);
        emits(e, HX_PART_SYSTEM, -1, -1, "\n<</SYS>>\n\n");
        open = true;
    }
    for (int32_t m = 0; m < r->n_messages; m++) {
        const hx_message *msg = &r->messages[m];
        if (msg->role == HX_ROLE_ASSISTANT) {
            emits(e, HX_PART_MESSAGE, m, -1, open ? " [/INST] " : " ");
            open = false;
            emit_blocks(e, HX_TEMPLATE_LLAMA2, HX_PART_MESSAGE, m, msg);
            emits(e, HX_PART_MESSAGE, m, -1, " </s>");
            after_answer = true;
        } else {
            if (!open) emits(e, HX_PART_MESSAGE, m, -1, after_answer ? "<s>[INST] " : "[INST] ");
            open = false;
            emit_blocks(e, HX_TEMPLATE_LLAMA2, HX_PART_MESSAGE, m, msg);
            emits(e, HX_PART_MESSAGE, m, -1, " [/INST]");
            after_answer = false;
        }
    }
    if (open) emits(e, HX_PART_GEN_PROMPT, -1, -1, " [/INST]");
}

// ----------------------------------------------------------------------------
// raw: plain text for base models

static const char *raw_role(const hx_message *m) {
    switch (m->role) {
    case HX_ROLE_SYSTEM:    return "System: ";
    case HX_ROLE_ASSISTANT: return "Assistant: ";
    case HX_ROLE_TOOL:      return "Tool: ";
    default:                return "User: ";
    }
}

static void raw_prompt(emitter *e, const hx_request *r) {
    if (has_system(r)) {
        emit_system_body(e, HX_TEMPLATE_RAW, r);
        emits(e, HX_PART_SYSTEM, -1, -1, "\n\n");
    }
    for (int32_t m = 0; m < r->n_messages; m++) {
        emits(e, HX_PART_MESSAGE, m, -1, raw_role(&r->messages[m]));
        emit_blocks(e, HX_TEMPLATE_RAW, HX_PART_MESSAGE, m, &r->messages[m]);
        emits(e, HX_PART_MESSAGE, m, -1, "\n\n");
    }
    emits(e, HX_PART_GEN_PROMPT, -1, -1, "Assistant: ");
}

// ----------------------------------------------------------------------------
// Entry points

int hx_render_prompt(hx_template t, const hx_request *r, hx_render *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if ((int)t < 0 || (int)t >= HX_TEMPLATE_COUNT) {
        eng_errf(err, errlen, "template %d: out of range", (int)t);
        return ENG_ERR_ARG;
    }
    emitter e = {0};
    switch (hx_request_kind_of(r)) {
    case HX_REQUEST_TOKENS:
        eng_errf(err, errlen, "session \"%s\" turn %d: the request is pre-tokenized: no text to render",
                 r->session ? r->session : "", r->turn);
        return ENG_ERR_ARG;
    case HX_REQUEST_PROMPT:
        emits(&e, HX_PART_PROMPT, -1, -1, r->prompt);
        return finish(&e, out);
    case HX_REQUEST_MESSAGES:
        break;
    }
    switch (t) {
    case HX_TEMPLATE_CHATML: chatml_prompt(&e, r); break;
    case HX_TEMPLATE_LLAMA2: llama2_prompt(&e, r); break;
    case HX_TEMPLATE_LLAMA3: llama3_prompt(&e, r); break;
    case HX_TEMPLATE_RAW:    raw_prompt(&e, r); break;
    }
    return finish(&e, out);
}

int hx_render_response(hx_template t, const hx_request *r, hx_render *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if ((int)t < 0 || (int)t >= HX_TEMPLATE_COUNT) {
        eng_errf(err, errlen, "template %d: out of range", (int)t);
        return ENG_ERR_ARG;
    }
    emitter e = {0};
    if (hx_request_kind_of(r) != HX_REQUEST_MESSAGES) {
        if (r->response_text) emits(&e, HX_PART_RESPONSE, -1, -1, r->response_text);
        return finish(&e, out);
    }
    /* Mirrors the assistant-message rendering of each template minus its header
     * (which is the generation prompt). */
    if (t == HX_TEMPLATE_LLAMA2) emits(&e, HX_PART_RESPONSE, -1, -1, " ");
    emit_blocks(&e, t, HX_PART_RESPONSE, -1, &r->response);
    switch (t) {
    case HX_TEMPLATE_CHATML: emits(&e, HX_PART_RESPONSE, -1, -1, "<|im_end|>\n"); break;
    case HX_TEMPLATE_LLAMA2: emits(&e, HX_PART_RESPONSE, -1, -1, " </s>"); break;
    case HX_TEMPLATE_LLAMA3: emits(&e, HX_PART_RESPONSE, -1, -1, "<|eot_id|>"); break;
    case HX_TEMPLATE_RAW:    emits(&e, HX_PART_RESPONSE, -1, -1, "\n\n"); break;
    }
    return finish(&e, out);
}

const hx_span *hx_render_find(const hx_render *r, size_t pos) {
    if (!r || pos >= r->len || r->n_spans == 0) return NULL;
    int32_t lo = 0, hi = r->n_spans - 1;
    while (lo < hi) { /* first span with end > pos */
        int32_t mid = lo + (hi - lo) / 2;
        if (r->spans[mid].end <= pos) lo = mid + 1;
        else hi = mid;
    }
    return &r->spans[lo];
}

size_t hx_render_system_end(const hx_render *r) {
    size_t end = 0;
    for (int32_t i = 0; r && i < r->n_spans; i++) {
        if (r->spans[i].part != HX_PART_SYSTEM && r->spans[i].part != HX_PART_TOOLS) break;
        end = r->spans[i].end;
    }
    return end;
}

const char *hx_span_describe(const hx_span *s, const hx_request *req, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    if (!s) {
        snprintf(buf, n, "end of text");
        return buf;
    }
    switch (s->part) {
    case HX_PART_SYSTEM:
        if (s->index < 0) snprintf(buf, n, "system turn (framing)");
        else snprintf(buf, n, "system block %d", s->index);
        break;
    case HX_PART_TOOLS:
        if (s->index < 0) snprintf(buf, n, "tools section (framing)");
        else if (req && s->index < req->n_tools) snprintf(buf, n, "tool %d (%s)", s->index, req->tools[s->index].name);
        else snprintf(buf, n, "tool %d", s->index);
        break;
    case HX_PART_MESSAGE: {
        const hx_message *m = (req && s->index >= 0 && s->index < req->n_messages) ? &req->messages[s->index] : NULL;
        char role[32] = "";
        if (m) snprintf(role, sizeof role, " (%s)", hx_role_name(m->role));
        if (s->block < 0) snprintf(buf, n, "message %d%s (framing)", s->index, role);
        else if (m && s->block < m->n_blocks)
            snprintf(buf, n, "message %d%s block %d (%s)", s->index, role, s->block,
                     hx_block_type_name(m->blocks[s->block].type));
        else snprintf(buf, n, "message %d%s block %d", s->index, role, s->block);
        break;
    }
    case HX_PART_GEN_PROMPT: snprintf(buf, n, "generation prompt"); break;
    case HX_PART_PROMPT:     snprintf(buf, n, "raw prompt"); break;
    case HX_PART_RESPONSE:
        if (s->block < 0) snprintf(buf, n, "response (framing)");
        else if (req && s->block < req->response.n_blocks)
            snprintf(buf, n, "response block %d (%s)", s->block, hx_block_type_name(req->response.blocks[s->block].type));
        else snprintf(buf, n, "response block %d", s->block);
        break;
    default: snprintf(buf, n, "?"); break;
    }
    return buf;
}

size_t hx_common_prefix(const char *a, size_t na, const char *b, size_t nb) {
    size_t n = na < nb ? na : nb, i = 0;
    while (i + 8 <= n) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y) break;
        i += 8;
    }
    while (i < n && a[i] == b[i]) i++;
    return i;
}
