/*
 * harness/serve/script.c: --script TRANSCRIPT: a session played back to a
 * real agent. Each request of the scripted conversation is answered with the
 * script's next recorded assistant turn (text, thinking, tool_use with its
 * input) instead of the model's tokens; the engine still prefills the
 * agent's real prompt, teacher-forces the scripted turn into the cache as
 * replay teacher-forces a recorded response, and with --verify compares.
 *
 * Which requests are the scripted conversation: the script's first request
 * names the task, the last text block of its first user message (Claude
 * Code sends `-p PROMPT` there, after its <system-reminder> blocks; Codex
 * and the Gemini CLI in a user message after their context's). A request
 * whose user messages before its first assistant one contain that text is
 * scripted; any other
 * (a quota probe with max_tokens 1, title generation, a summary) is a side
 * request, answered by the model and counted, and does not advance the
 * script. A script whose first request has no user text scripts every
 * request, in order. When the script is played out, the model answers (said
 * once on stderr).
 *
 * Departure: an agent that follows the script echoes its turns back, so the
 * assistant messages of scripted request k must be the script's turns 0..k-1,
 * block by block (and its system blocks the script's, after anthropic-cch
 * normalization, when the script states them). The first difference is
 * described (message, block, byte) on stderr and in the X-Kvreplay-Script
 * header; the turn is played all the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normalize.h"
#include "serve_int.h"
#include "status.h"
#include "str.h"

struct hx_script {
    hx_transcript t;
    int32_t       next;
    const char   *task;   /* the text that marks the scripted conversation, or NULL: every request */
};

static const hx_message *first_user(const hx_request *q) {
    for (int32_t m = 0; m < q->n_messages; m++)
        if (q->messages[m].role == HX_ROLE_USER) return &q->messages[m];
    return NULL;
}

int hx_script_open(const char *path, hx_script **out, char *err, size_t errlen) {
    *out = NULL;
    hx_script *s = calloc(1, sizeof *s);
    if (!s) return ENG_ERR_NOMEM;
    int rc = hx_transcript_read(path, false, &s->t, NULL, err, errlen);
    if (rc == ENG_OK && s->t.n == 0) {
        eng_errf(err, errlen, "%s: the script has no requests", path);
        rc = ENG_ERR_FORMAT;
    }
    if (rc) {
        free(s);
        return rc;
    }
    const hx_message *u = first_user(&s->t.reqs[0]);
    for (int32_t b = u ? u->n_blocks - 1 : -1; b >= 0 && !s->task; b--)
        if (u->blocks[b].type == HX_BLOCK_TEXT && u->blocks[b].text[0]) s->task = u->blocks[b].text;
    *out = s;
    return ENG_OK;
}

void hx_script_close(hx_script *s) {
    if (!s) return;
    hx_transcript_free(&s->t);
    free(s);
}

int32_t hx_script_length(const hx_script *s) { return s->t.n; }

static bool is_scripted(const hx_script *s, const hx_request *q) {
    if (hx_request_kind_of(q) != HX_REQUEST_MESSAGES) return false;
    if (!s->task) return true;
    /* the user messages before the first assistant message: Codex and the Gemini CLI send their context
     * in a user message of its own before the prompt */
    for (int32_t m = 0; m < q->n_messages && q->messages[m].role != HX_ROLE_ASSISTANT; m++) {
        const hx_message *u = &q->messages[m];
        for (int32_t b = 0; u->role == HX_ROLE_USER && b < u->n_blocks; b++)
            if (u->blocks[b].type == HX_BLOCK_TEXT && strstr(u->blocks[b].text, s->task)) return true;
    }
    return false;
}

static size_t first_diff(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

/* The first difference of two blocks ("" when equal) into buf. */
static void block_diff(const hx_block *want, const hx_block *got, char *buf, size_t cap) {
    buf[0] = '\0';
    if (want->type != got->type) {
        snprintf(buf, cap, "the script has a %s block, the request a %s block", hx_block_type_name(want->type),
                 hx_block_type_name(got->type));
        return;
    }
    const char *fields[][2] = {{"text", "text"}, {"id", "id"}, {"name", "name"}, {"input", "input"}};
    const char *wv[] = {want->text, want->id, want->name, want->input};
    const char *gv[] = {got->text, got->id, got->name, got->input};
    for (int k = 0; k < 4; k++) {
        const char *a = wv[k] ? wv[k] : "", *b = gv[k] ? gv[k] : "";
        if (!strcmp(a, b)) continue;
        size_t at = first_diff(a, b);
        snprintf(buf, cap, "%s differs at byte %zu (the script: \"%.24s\", the request: \"%.24s\")", fields[k][0], at,
                 a + at, b + at);
        return;
    }
}

/* Where q departs from scripted request k ("" when it follows it). */
static void departure(const hx_script *s, int32_t k, const hx_request *q, char *buf, size_t cap) {
    buf[0] = '\0';
    const hx_request *want = &s->t.reqs[k];
    char d[160];
    if (want->n_system > 0) {  /* the script states the system prompt: it must be the agent's */
        for (int32_t i = 0; i < want->n_system; i++) {
            if (i >= q->n_system) {
                snprintf(buf, cap, "system block %d: the script has %d system blocks, the request %d", i,
                         want->n_system, q->n_system);
                return;
            }
            char *a = hx_strdup(want->system[i].text), *b = hx_strdup(q->system[i].text);
            if (a && b && hx_normalize_cch_text(&a, 0) >= 0 && hx_normalize_cch_text(&b, 0) >= 0 && strcmp(a, b)) {
                size_t at = first_diff(a, b);
                snprintf(buf, cap, "system block %d: differs at byte %zu", i, at);
            }
            free(a);
            free(b);
            if (buf[0]) return;
        }
    }
    /* the assistant messages: the script's turns 0..k-1, echoed back */
    int32_t turn = 0;
    for (int32_t m = 0; m < q->n_messages; m++) {
        const hx_message *got = &q->messages[m];
        if (got->role != HX_ROLE_ASSISTANT) continue;
        if (turn >= k) {
            snprintf(buf, cap, "message %d (assistant): the request has more assistant turns than the script's %d "
                     "before this one", m, k);
            return;
        }
        const hx_message *w = &s->t.reqs[turn].response;
        for (int32_t b = 0; b < w->n_blocks || b < got->n_blocks; b++) {
            if (b >= got->n_blocks || b >= w->n_blocks) {
                snprintf(buf, cap, "message %d (assistant, the script's turn %d): the script has %d blocks, the "
                         "request %d", m, turn, w->n_blocks, got->n_blocks);
                return;
            }
            block_diff(&w->blocks[b], &got->blocks[b], d, sizeof d);
            if (d[0]) {
                snprintf(buf, cap, "message %d (assistant, the script's turn %d) block %d (%s): %s", m, turn, b,
                         hx_block_type_name(w->blocks[b].type), d);
                return;
            }
        }
        turn++;
    }
    if (turn < k)
        snprintf(buf, cap, "the request has %d assistant turns, the script %d before this one", turn, k);
}

int hx_script_next(hx_script *s, const hx_request *q, const hx_request **turn, int32_t *index, bool *exhausted,
                   char *dep, size_t cap) {
    *turn = NULL;
    *index = -1;
    *exhausted = false;
    dep[0] = '\0';
    if (!is_scripted(s, q)) return ENG_OK;
    if (s->next >= s->t.n) {
        *exhausted = true;
        return ENG_OK;
    }
    *index = s->next;
    *turn = &s->t.reqs[s->next];
    departure(s, s->next, q, dep, cap);
    s->next++;
    return ENG_OK;
}
