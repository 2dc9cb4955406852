/*
 * harness/transcripts/importers/claude_code.c: `--from claude-code`: Claude
 * Code session logs (~/.claude/projects/<p>/<session>.jsonl).
 *
 * Each call's prompt is rebuilt by walking the parentUuid chain back from
 * the call's first line (bookkeeping lines are transparent), merging the
 * assistant lines of one requestId into one message; chains are walked at
 * most n_lines steps. The logs carry no system prompt or tools: the built-in
 * stand-in of hx_synth_agent_prefix(seed 0, 24000 bytes) is used, its
 * billing checksum per request, unless --system-file / --tools-file are given.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "importer.h"
#include "status.h"
#include "synth_transcript.h"
#include "util.h"

enum { CC_OTHER = 0, CC_USER = 1, CC_ASSISTANT = 2 };

typedef struct cc_line {
    int64_t    lineno;
    int        kind;
    bool       sidechain;
    bool       dup;         /* a later line with an already seen uuid: ignored */
    char      *uuid;        /* NULL when absent */
    char      *parent;      /* NULL for a chain root */
    char      *session_id;  /* conversation lines */
    char      *req;         /* assistant lines: requestId, else message.id, else "line-N" */
    hx_message msg;
} cc_line;

static void cc_line_free(cc_line *l) {
    free(l->uuid);
    free(l->parent);
    free(l->session_id);
    free(l->req);
    hx_message_free(&l->msg);
}

static int cc_parse_line(json_t *j, const char *path, int64_t line, cc_line *l, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->lineno = line;
    const char *type = json_string_value(json_object_get(j, "type"));
    const json_t *ju = json_object_get(j, "uuid"), *jp = json_object_get(j, "parentUuid");
    if (!type || (strcmp(type, "user") && strcmp(type, "assistant"))) {
        /* bookkeeping: kept only as a transparent link of the chain */
        if (json_is_string(ju) && !(l->uuid = hx_strdup(json_string_value(ju)))) return ENG_ERR_NOMEM;
        if (json_is_string(jp) && !(l->parent = hx_strdup(json_string_value(jp)))) return ENG_ERR_NOMEM;
        return ENG_OK;
    }
    l->kind = type[0] == 'u' ? CC_USER : CC_ASSISTANT;
    int rc = ENG_ERR_FORMAT;
    if (!json_is_string(ju)) {
        hx_errf_at(err, errlen, path, line, "uuid", ju ? "expected a string" : "missing");
        goto fail;
    }
    if (jp && !json_is_null(jp) && !json_is_string(jp)) {
        hx_errf_at(err, errlen, path, line, "parentUuid", "expected a string or null");
        goto fail;
    }
    const json_t *sc = json_object_get(j, "isSidechain");
    if (sc && !json_is_boolean(sc)) {
        hx_errf_at(err, errlen, path, line, "isSidechain", "expected true or false");
        goto fail;
    }
    l->sidechain = json_is_true(sc);
    const json_t *sid = json_object_get(j, "sessionId");
    if (sid && !json_is_string(sid)) {
        hx_errf_at(err, errlen, path, line, "sessionId", "expected a string");
        goto fail;
    }
    const json_t *msg = json_object_get(j, "message");
    if (!json_is_object(msg)) {
        hx_errf_at(err, errlen, path, line, "message", msg ? "expected an object" : "missing");
        goto fail;
    }
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (!role || strcmp(role, type)) {
        hx_errf_at(err, errlen, path, line, "message.role", "expected \"%s\" (the line's type)", type);
        goto fail;
    }
    l->msg.role = l->kind == CC_USER ? HX_ROLE_USER : HX_ROLE_ASSISTANT;
    if ((rc = hx_blocks_from_json(json_object_get(msg, "content"), path, line, "message.content", &l->msg.blocks,
                                  &l->msg.n_blocks, err, errlen)))
        goto fail;
    rc = ENG_ERR_NOMEM;
    if (!(l->uuid = hx_strdup(json_string_value(ju)))) goto fail;
    if (json_is_string(jp) && !(l->parent = hx_strdup(json_string_value(jp)))) goto fail;
    if (!(l->session_id = hx_strdup(sid ? json_string_value(sid) : "claude-code"))) goto fail;
    if (l->kind == CC_ASSISTANT) {
        const char *rid = json_string_value(json_object_get(j, "requestId"));
        const char *mid = json_string_value(json_object_get(msg, "id"));
        char tmp[40];
        snprintf(tmp, sizeof tmp, "line-%lld", (long long)line);
        if (!(l->req = hx_strdup(rid ? rid : mid ? mid : tmp))) goto fail;
    }
    return ENG_OK;
fail:
    cc_line_free(l);
    memset(l, 0, sizeof *l);
    return rc;
}

typedef struct cc_group {
    int32_t *lines;  /* (n) indices of the assistant lines, in file order */
    int32_t  n;
} cc_group;

/* Builds the request of group g (prompt from the chain, response from the group). */
static int cc_request(const cc_line *L, int32_t n_lines, const hx_strmap *by_uuid, const cc_group *g, const char *path,
                      hx_request *q, int32_t *chain, char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    const cc_line *f = &L[g->lines[0]];
    q->line = f->lineno;
    /* walk back from the first line's parent */
    int32_t n_chain = 0;
    const char *cur = f->parent;
    while (cur) {
        int64_t idx;
        if (!hx_strmap_get(by_uuid, cur, &idx)) break; /* a parent outside this file: the chain starts here */
        if (n_chain >= n_lines) {
            hx_errf_at(err, errlen, path, f->lineno, "parentUuid", "the parentUuid chain loops");
            return ENG_ERR_FORMAT;
        }
        chain[n_chain++] = (int32_t)idx;
        cur = L[idx].parent;
    }
    /* replay it forwards: merge assistant lines per request id, consecutive user lines */
    const char **keys = NULL;  /* (n_messages) request id of each assistant message, else NULL */
    int rc = ENG_OK;
    for (int32_t c = n_chain - 1; c >= 0 && !rc; c--) {
        const cc_line *l = &L[chain[c]];
        if (l->kind == CC_OTHER || l->dup) continue;
        int32_t target = -1;
        if (l->kind == CC_ASSISTANT) {
            for (int32_t m = q->n_messages - 1; m >= 0 && target < 0; m--)
                if (keys[m] && !strcmp(keys[m], l->req)) target = m;
        } else if (q->n_messages > 0 && q->messages[q->n_messages - 1].role == HX_ROLE_USER) {
            target = q->n_messages - 1;
        }
        if (target < 0) {
            const char **nk = realloc(keys, (size_t)(q->n_messages + 1) * sizeof *nk);
            if (!nk) { rc = ENG_ERR_NOMEM; break; }
            keys = nk;
            hx_message m = {l->msg.role, NULL, 0};
            if ((rc = hx_imp_push_msg(q, &m))) break;
            keys[q->n_messages - 1] = l->kind == CC_ASSISTANT ? l->req : NULL;
            target = q->n_messages - 1;
        }
        rc = hx_imp_append_blocks(&q->messages[target], &l->msg);
    }
    free(keys);
    for (int32_t i = 0; i < g->n && !rc; i++) rc = hx_imp_append_blocks(&q->response, &L[g->lines[i]].msg);
    if (rc) hx_request_free(q);
    return rc;
}

static int import_claude_code(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                              int64_t *n_skipped, const hx_imp_standin *si, char *err, size_t errlen) {
    cc_line *L = NULL;
    int32_t n_lines = 0, cap = 0;
    hx_strmap by_uuid = {0}, by_req = {0}, side_roots = {0}, turns = {0};
    cc_group *groups = NULL;
    int32_t n_groups = 0;
    int32_t *chain = NULL;
    int rc = ENG_OK;
    size_t pos = 0;
    int64_t lineno = 0;
    const char *s;
    size_t len;
    /* 1. parse every line */
    while (hx_imp_next_line(data, n, &pos, &lineno, &s, &len)) {
        if (n_lines == INT32_MAX - 1) { rc = ENG_ERR_RANGE; goto out; }
        json_t *j = hx_imp_load_line(s, len, path, lineno, err, errlen);
        cc_line l;
        rc = ENG_ERR_FORMAT;
        if (j) {
            rc = cc_parse_line(j, path, lineno, &l, err, errlen);
            json_decref(j);
        }
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc) goto out;
        if (n_lines == cap) {
            int32_t ncap = cap ? cap * 2 : 64;
            cc_line *nl = realloc(L, (size_t)ncap * sizeof *nl);
            if (!nl) { cc_line_free(&l); rc = ENG_ERR_NOMEM; goto out; }
            L = nl;
            cap = ncap;
        }
        L[n_lines] = l;
        if (l.uuid) {
            if (hx_strmap_get(&by_uuid, l.uuid, NULL)) L[n_lines].dup = true;
            else if ((rc = hx_strmap_put(&by_uuid, l.uuid, n_lines))) { n_lines++; goto out; }
        }
        n_lines++;
    }
    /* 2. group the assistant lines by request id, in order of first appearance */
    for (int32_t i = 0; i < n_lines; i++) {
        if (L[i].kind != CC_ASSISTANT || L[i].dup) continue;
        int64_t g;
        if (!hx_strmap_get(&by_req, L[i].req, &g)) {
            cc_group *ng = realloc(groups, (size_t)(n_groups + 1) * sizeof *ng);
            if (!ng) { rc = ENG_ERR_NOMEM; goto out; }
            groups = ng;
            groups[n_groups] = (cc_group){NULL, 0};
            g = n_groups++;
            if ((rc = hx_strmap_put(&by_req, L[i].req, g))) goto out;
        }
        int32_t *nl = realloc(groups[g].lines, (size_t)(groups[g].n + 1) * sizeof *nl);
        if (!nl) { rc = ENG_ERR_NOMEM; goto out; }
        groups[g].lines = nl;
        groups[g].lines[groups[g].n++] = i;
    }
    if (!(chain = malloc((size_t)(n_lines ? n_lines : 1) * sizeof *chain))) { rc = ENG_ERR_NOMEM; goto out; }
    /* 3. one request per group */
    for (int32_t g = 0; g < n_groups; g++) {
        hx_request q;
        rc = cc_request(L, n_lines, &by_uuid, &groups[g], path, &q, chain, err, errlen);
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc) goto out;
        const cc_line *f = &L[groups[g].lines[0]];
        char name[600];
        const char *main_name = o->session ? o->session : f->session_id;
        if (f->sidechain) {
            /* the sidechain's root: climb while the parent is a sidechain line */
            const cc_line *root = f;
            for (int32_t steps = 0; root->parent && steps < n_lines; steps++) {
                int64_t idx;
                if (!hx_strmap_get(&by_uuid, root->parent, &idx) || !L[idx].sidechain) break;
                root = &L[idx];
            }
            int64_t k;
            if (!hx_strmap_get(&side_roots, root->uuid, &k)) {
                k = (int64_t)side_roots.n;
                if ((rc = hx_strmap_put(&side_roots, root->uuid, k))) { hx_request_free(&q); goto out; }
            }
            snprintf(name, sizeof name, "%.500s/sidechain-%lld", main_name, (long long)k);
        } else {
            snprintf(name, sizeof name, "%.500s", main_name);
        }
        int64_t t = 0;
        hx_strmap_get(&turns, name, &t);
        q.turn = (int32_t)t;
        if ((rc = hx_strmap_put(&turns, name, t + 1)) || !(q.session = hx_strdup(name)) ||
            (rc = hx_imp_standin_apply(si, &q, f->req)) || (rc = hx_transcript_push(out, &q))) {
            hx_request_free(&q);
            rc = rc ? rc : ENG_ERR_NOMEM;
            goto out;
        }
    }
    rc = ENG_OK;
out:
    for (int32_t i = 0; i < n_lines; i++) cc_line_free(&L[i]);
    free(L);
    for (int32_t g = 0; g < n_groups; g++) free(groups[g].lines);
    free(groups);
    free(chain);
    hx_strmap_free(&by_uuid);
    hx_strmap_free(&by_req);
    hx_strmap_free(&side_roots);
    hx_strmap_free(&turns);
    return rc;
}

static int claude_code_import(const hx_import_opts *o, const char *path, const char *data, size_t n,
                              hx_transcript *out, int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    bool have_sys = o->system_file != NULL, have_tools = o->tools_file != NULL;
    if (!have_sys || !have_tools) { /* the built-in stand-in */
        hx_block *sys = NULL;
        hx_tool *tools = NULL;
        int32_t ns = 0, nt = 0;
        int rc = hx_synth_agent_prefix(0, 24000, NULL, &sys, &ns, &tools, &nt);
        if (rc) return rc;
        if (!have_sys) {
            si->system = sys, si->n_system = ns, si->billing = true;
        } else {
            hx_imp_free_blocks(sys, ns);
        }
        if (!have_tools) si->tools = tools, si->n_tools = nt;
        else hx_imp_free_tools(tools, nt);
    }
    return import_claude_code(o, path, data, n, out, n_skipped, si, err, errlen);
}

const hx_importer hx_importer_claude_code = {
    .name = "claude-code",
    .help = "a Claude Code session log (~/.claude/projects/<project>/<session>.jsonl)",
    .own_prefix = true,
    .import = claude_code_import,
};
