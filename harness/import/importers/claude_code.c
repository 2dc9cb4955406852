/*
 * harness/import/importers/claude_code.c: `--from claude-code`: Claude
 * Code session logs (~/.claude/projects/<p>/<session>.jsonl, and a
 * subagent's <session>/subagents/agent-<id>.jsonl).
 *
 * The conversation of each model call is rebuilt as Claude Code rebuilds it
 * from the parentUuid chain (rules in docs/transcripts.md, "claude-code"):
 *   - walk back from the call's first assistant line through every line
 *     that has a uuid (progress, system and bookkeeping lines are
 *     transparent links) to a root (parentUuid null, e.g. a compaction's
 *     boundary line, so the compaction summary that follows starts the
 *     history), then replay it forwards;
 *   - assistant lines of one requestId merge into one assistant message;
 *     consecutive user-side lines (typed text, tool results, isMeta text,
 *     attachments rendered as <system-reminder> text) merge into one user
 *     message, as the API request had them;
 *   - an `api_error` system line that was written late (its parent is the
 *     line before the failed call, but it sits after the conversation went
 *     on) is re-linked to the conversation line just before it in the file
 *     when its recorded parent is an ancestor of that line, so the chain
 *     through it is not rerooted one request back;
 *   - client-made assistant messages (model "<synthetic>") are never model
 *     calls; API error messages among them are left out of later prompts;
 *   - empty thinking blocks (the log keeps only their signature) are
 *     dropped; unknown block and attachment types are kept as their JSON
 *     text, counted and warned about, never dropped.
 * Nothing is rewritten silently: a parentUuid naming no line of the file is
 * an error; with --skip-bad a request whose history (or response) lost a
 * skipped line is dropped whole, said per request and counted.
 *
 * The log has no system prompt or tools: each session gets the stand-in of
 * cc_standin.h, built from its own first line (cwd, version, entrypoint,
 * date, model, gitBranch), unless --system-file / --tools-file are given.
 * Chains are walked at most n_lines steps (a loop is an error).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cc_standin.h"
#include "errors.h"
#include "import.h"
#include "importer.h"
#include "json.h"
#include "jsonl.h"
#include "status.h"
#include "str.h"
#include "util.h"

enum { CC_OTHER = 0, CC_USER = 1, CC_ASSISTANT = 2, CC_ATTACH = 3, CC_SYSTEM = 4 };

typedef struct cc_line {
    int64_t    lineno;
    int        kind;
    bool       sidechain;
    bool       dup;           /* a later line with an already seen uuid: ignored */
    bool       bad;           /* skipped with --skip-bad (uuid / requestId kept when readable) */
    bool       synthetic;     /* assistant, model "<synthetic>": made by the client, not a model call */
    bool       api_error_msg; /* a synthetic API error message: not sent in later prompts */
    bool       api_error;     /* system line, subtype api_error */
    bool       noted;         /* its re-link is noted on the first request through it */
    int32_t    relink;        /* api_error: index of the line it is re-linked to, or -1 */
    char      *uuid;          /* NULL when absent */
    char      *parent;        /* NULL for a chain root */
    char      *session_id, *agent_id, *cwd, *version, *entrypoint, *git_branch, *model;
    char       date[11];      /* YYYY-MM-DD of the timestamp, "" when absent */
    char      *req;           /* assistant lines: requestId, else message.id, else "line-N" */
    char      *why;           /* bad lines: the error */
    hx_call_usage usage;      /* assistant lines: message.usage */
    hx_message msg;           /* what the line contributes to the prompt (empty: nothing) */
} cc_line;

static void cc_line_free(cc_line *l) {
    free(l->uuid);
    free(l->parent);
    free(l->session_id);
    free(l->agent_id);
    free(l->cwd);
    free(l->version);
    free(l->entrypoint);
    free(l->git_branch);
    free(l->model);
    free(l->req);
    free(l->why);
    hx_call_usage_free(&l->usage);
    hx_message_free(&l->msg);
}

/* A string member, or NULL. */
static const char *jstr(const json_t *j, const char *key) { return json_string_value(json_object_get(j, key)); }

static int dup_opt(char **dst, const char *s) {
    if (s && !(*dst = hx_strdup(s))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Attachments: the text Claude Code sends for them (own wording around the log's content)

/* Appends "<system-reminder>\n" TEXT "\n</system-reminder>" as a user text block of m. */
static int push_reminder(hx_message *m, const char *text) {
    eng_buf b = {0};
    if (eng_buf_printf(&b, "<system-reminder>\n%s\n</system-reminder>", text)) {
        eng_buf_free(&b);
        return ENG_ERR_NOMEM;
    }
    hx_block blk;
    int rc = hx_block_init(&blk, HX_BLOCK_TEXT, b.data, NULL, NULL, NULL, false);
    eng_buf_free(&b);
    if (rc) return rc;
    if ((rc = hx_message_push_block(m, &blk))) hx_block_free(&blk);
    return rc;
}

/* The strings of a JSON array joined by sep (non-strings skipped). */
static int join_strings(eng_buf *b, const json_t *a, const char *sep) {
    int first = 1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s) continue;
        if (eng_buf_printf(b, "%s%s", first ? "" : sep, s)) return ENG_ERR_NOMEM;
        first = 0;
    }
    return ENG_OK;
}

/* "     1\tline" numbering of a file's text, as a Read tool result shows it. */
static int numbered_lines(eng_buf *b, const char *text, int first_line) {
    int n = first_line;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (eng_buf_printf(b, "%6d\t%.*s%s", n++, (int)len, p, nl ? "\n" : "")) return ENG_ERR_NOMEM;
        p += len + (nl ? 1 : 0);
    }
    return ENG_OK;
}

/* Attachment types Claude Code records but does not send to the model. */
static const char *const k_unsent[] = {"command_permissions", "hook_system_message", "hook_non_blocking_error",
                                       "hook_cancelled", "hook_error_during_execution", "structured_output"};

/* Renders attachment a into m (a user message). *known is false for a type
 * not known here (then its JSON is sent as the reminder's text). */
static int cc_attachment(const json_t *a, hx_message *m, bool *known, bool *sent) {
    *known = true;
    *sent = true;
    const char *type = jstr(a, "type");
    if (!type) type = "";
    for (size_t i = 0; i < sizeof k_unsent / sizeof k_unsent[0]; i++)
        if (!strcmp(type, k_unsent[i])) {
            *sent = false;
            return ENG_OK;
        }
    eng_buf b = {0};
    int rc = ENG_OK;
    const char *fname = jstr(a, "filename") ? jstr(a, "filename") : jstr(a, "displayPath");
    if (!fname) fname = "(unnamed file)";
    if (!strcmp(type, "deferred_tools_delta")) {
        const json_t *add = json_object_get(a, "addedLines");
        if (!json_array_size(add)) add = json_object_get(a, "addedNames");
        const json_t *rem = json_object_get(a, "removedNames");
        if (json_array_size(add)) {
            rc = eng_buf_printf(&b, "These deferred tools can be loaded with ToolSearch; their schemas are not loaded, "
                                    "so load them (query \"select:NAME[,NAME...]\") before calling them:\n");
            if (!rc) rc = join_strings(&b, add, "\n");
        }
        if (!rc && json_array_size(rem)) {
            rc = eng_buf_printf(&b, "%sThese deferred tools are no longer available:\n", b.len ? "\n\n" : "");
            if (!rc) rc = join_strings(&b, rem, "\n");
        }
    } else if (!strcmp(type, "mcp_instructions_delta")) {
        const json_t *blocks = json_object_get(a, "addedBlocks");
        if (json_array_size(blocks)) {
            rc = eng_buf_printf(&b, "Instructions from the connected MCP servers on using their tools and resources:\n\n");
            if (!rc) rc = join_strings(&b, blocks, "\n\n");
        }
        const json_t *rem = json_object_get(a, "removedNames");
        if (!rc && json_array_size(rem)) {
            rc = eng_buf_printf(&b, "%sThese MCP servers disconnected; their instructions no longer apply: ",
                                b.len ? "\n\n" : "");
            if (!rc) rc = join_strings(&b, rem, ", ");
        }
    } else if (!strcmp(type, "skill_listing")) {
        const char *c = jstr(a, "content");
        if (c && *c) rc = eng_buf_printf(&b, "Skills the Skill tool can run:\n\n%s", c);
    } else if (!strcmp(type, "task_reminder") || !strcmp(type, "todo_reminder")) {
        bool tasks = type[1] == 'a';
        const json_t *items = json_object_get(a, "content");
        if (json_array_size(items) == 0) {
            rc = eng_buf_printf(&b, "The %s list is empty and its tools have not been used lately. When the work has "
                                    "several steps, track them with %s; ignore this when it does not apply, and do "
                                    "not mention this reminder to the user.",
                                tasks ? "task" : "todo", tasks ? "TaskCreate and TaskUpdate" : "TodoWrite");
        } else {
            char *c = hx_json_canonical(items);
            rc = c ? eng_buf_printf(&b, "The current %s list (keep it up to date; do not mention this reminder):\n%s",
                                    tasks ? "task" : "todo", c)
                   : ENG_ERR_NOMEM;
            free(c);
        }
    } else if (!strcmp(type, "queued_command")) {
        const char *p = jstr(a, "prompt");
        if (p) {  /* a prompt typed (or a notification queued) while the model worked: sent as the user's text */
            hx_block blk;
            if ((rc = hx_block_init(&blk, HX_BLOCK_TEXT, p, NULL, NULL, NULL, false))) return rc;
            if ((rc = hx_message_push_block(m, &blk))) hx_block_free(&blk);
            return rc;
        }
    } else if (!strcmp(type, "file")) {
        const json_t *c = json_object_get(a, "content");
        const json_t *f = json_object_get(c, "file");
        const char *text = jstr(f, "content");
        if (text) {
            rc = eng_buf_printf(&b, "The user mentioned %s; its contents:\n", fname);
            const json_t *start = json_object_get(f, "startLine");
            if (!rc) rc = numbered_lines(&b, text, json_is_integer(start) ? (int)json_integer_value(start) : 1);
        } else {
            rc = eng_buf_printf(&b, "The user mentioned %s.", fname);
        }
    } else if (!strcmp(type, "compact_file_reference")) {
        rc = eng_buf_printf(&b, "Note: %s was read before the conversation was summarized; it is too large to repeat "
                                "here. Read it again with the Read tool when you need it.", fname);
    } else if (!strcmp(type, "edited_text_file")) {
        const char *snip = jstr(a, "snippet");
        rc = eng_buf_printf(&b, "Note: %s was changed outside this conversation (by the user or a tool such as a "
                                "linter). Take the change into account; do not revert it unless asked. The changed "
                                "lines now read:\n%s", fname, snip ? snip : "");
    } else if (!strcmp(type, "selected_lines_in_ide")) {
        const json_t *ls = json_object_get(a, "lineStart"), *le = json_object_get(a, "lineEnd");
        const char *c = jstr(a, "content");
        rc = eng_buf_printf(&b, "The user selected lines %lld to %lld of %s in the IDE:\n%s\n\nThis may or may not "
                                "concern the current task.", (long long)json_integer_value(ls),
                            (long long)json_integer_value(le), fname, c ? c : "");
    } else if (!strcmp(type, "opened_file_in_ide")) {
        rc = eng_buf_printf(&b, "The user opened %s in the IDE. This may or may not concern the current task.", fname);
    } else if (!strcmp(type, "hook_success") || !strcmp(type, "hook_additional_context")) {
        const json_t *c = json_object_get(a, "content");
        const char *hook = jstr(a, "hookName") ? jstr(a, "hookName") : jstr(a, "hookEvent");
        if (json_is_string(c) && json_string_length(c) > 0) {
            rc = eng_buf_printf(&b, "%s hook %s: %s", hook ? hook : "A", type[5] == 's' ? "output" : "context",
                                json_string_value(c));
        } else if (json_array_size(c)) {
            rc = eng_buf_printf(&b, "%s hook context: ", hook ? hook : "A");
            if (!rc) rc = join_strings(&b, c, "\n");
        }
    } else if (!strcmp(type, "date_change")) {
        const char *d = jstr(a, "newDate");
        rc = eng_buf_printf(&b, "The date is now %s. Do not mention this to the user unless it matters.", d ? d : "?");
    } else if (!strcmp(type, "nested_memory") || !strcmp(type, "memory")) {
        const char *c = jstr(a, "content");
        const json_t *ct = json_object_get(a, "content");
        if (!c && json_is_object(ct)) c = jstr(ct, "content");
        const char *path = jstr(a, "path") ? jstr(a, "path") : fname;
        rc = eng_buf_printf(&b, "Contents of %s:\n\n%s", path, c ? c : "");
    } else if (!strcmp(type, "critical_system_reminder") || !strcmp(type, "output_style") ||
               !strcmp(type, "plan_mode") || !strcmp(type, "plan_mode_reentry") || !strcmp(type, "plan_mode_exit")) {
        const char *c = jstr(a, "content");
        char *js = c ? NULL : hx_json_canonical(a);
        rc = (c || js) ? eng_buf_printf(&b, "%s", c ? c : js) : ENG_ERR_NOMEM;
        free(js);
    } else {
        *known = false;  /* kept whole, as its JSON text */
        char *js = hx_json_canonical(a);
        rc = js ? eng_buf_printf(&b, "%s", js) : ENG_ERR_NOMEM;
        free(js);
    }
    if (!rc && b.len) rc = push_reminder(m, b.data);
    if (!rc && !b.len) *sent = false;  /* nothing to say (an empty delta, an empty hook output) */
    eng_buf_free(&b);
    return rc;
}

// ----------------------------------------------------------------------------
// Lines

typedef struct cc_ctx {
    const hx_import_opts *o;
    const char           *path;
    const char           *data;
    size_t                n;
    hx_import_stats      *st;
    hx_block_opts         bo;
    bool                  deferred;  /* the log announces deferred tools */
    hx_strmap             deferred_names;  /* the tools it announces */
} cc_ctx;

static int usage_count(const json_t *u, const char *key, int64_t *out) {
    const json_t *v = json_object_get(u, key);
    if (!v || json_is_null(v)) { *out = 0; return ENG_OK; }
    if (!json_is_integer(v) || json_integer_value(v) < 0) return ENG_ERR_FORMAT;
    *out = json_integer_value(v);
    return ENG_OK;
}

static int cc_parse_line(cc_ctx *x, json_t *j, size_t n_big, int64_t line, cc_line *l, char *err, size_t errlen) {
    const char *path = x->path;
    const char *type = jstr(j, "type");
    const json_t *ju = json_object_get(j, "uuid"), *jp = json_object_get(j, "parentUuid");
    int rc = ENG_ERR_NOMEM;
    l->kind = !type ? CC_OTHER
              : !strcmp(type, "user") ? CC_USER
              : !strcmp(type, "assistant") ? CC_ASSISTANT
              : !strcmp(type, "attachment") ? CC_ATTACH
              : !strcmp(type, "system") ? CC_SYSTEM
              : CC_OTHER;
    const char *ts = jstr(j, "timestamp");
    if (ts && strlen(ts) >= 10) memcpy(l->date, ts, 10);
    l->sidechain = json_is_true(json_object_get(j, "isSidechain"));
    if (dup_opt(&l->session_id, jstr(j, "sessionId")) || dup_opt(&l->agent_id, jstr(j, "agentId")) ||
        dup_opt(&l->cwd, jstr(j, "cwd")) || dup_opt(&l->version, jstr(j, "version")) ||
        dup_opt(&l->entrypoint, jstr(j, "entrypoint")) || dup_opt(&l->git_branch, jstr(j, "gitBranch")))
        return ENG_ERR_NOMEM;
    if (l->kind != CC_USER && l->kind != CC_ASSISTANT) {
        /* bookkeeping, system and attachment lines: links of the chain */
        if (json_is_string(ju) && dup_opt(&l->uuid, json_string_value(ju))) return rc;
        if (json_is_string(jp) && dup_opt(&l->parent, json_string_value(jp))) return rc;
        if (l->kind == CC_SYSTEM) {
            const char *st = jstr(j, "subtype");
            l->api_error = st && !strcmp(st, "api_error");
        }
        if (l->kind == CC_ATTACH) {
            const json_t *a = json_object_get(j, "attachment");
            char f[HX_IMP_FIELD_MAX];
            if (!json_is_object(a)) {
                hx_errf_at(err, errlen, path, line, "attachment", a ? "expected an object" : "missing");
                return ENG_ERR_FORMAT;
            }
            if (n_big && hx_json_find_big(a, "attachment", f, sizeof f)) {
                hx_errf_at(err, errlen, path, line, f, "an integer beyond 2^63-1 in text the client sends");
                return ENG_ERR_FORMAT;
            }
            bool known, sent;
            l->msg.role = HX_ROLE_USER;
            if ((rc = cc_attachment(a, &l->msg, &known, &sent))) return rc;
            if (x->st) {
                if (!known) {
                    x->st->unknown_attachments++;
                    const char *t = jstr(a, "type");
                    size_t have = strlen(x->st->unknown_attachment_types);
                    if (t && !strstr(x->st->unknown_attachment_types, t) &&
                        have + strlen(t) + 2 < sizeof x->st->unknown_attachment_types)
                        snprintf(x->st->unknown_attachment_types + have,
                                 sizeof x->st->unknown_attachment_types - have, "%s%s", have ? "," : "", t);
                }
                if (sent) x->st->attachments++;
                else x->st->attachments_unsent++;
            }
            const char *t = jstr(a, "type");
            if (t && !strcmp(t, "deferred_tools_delta")) {
                x->deferred = true;
                const json_t *names = json_object_get(a, "addedNames");
                for (size_t i = 0; i < json_array_size(names); i++) {
                    const char *nm = json_string_value(json_array_get(names, i));
                    if (nm && hx_strmap_put(&x->deferred_names, nm, 1)) return ENG_ERR_NOMEM;
                }
            }
        }
        return ENG_OK;
    }
    rc = ENG_ERR_FORMAT;
    if (!json_is_string(ju)) {
        hx_errf_at(err, errlen, path, line, "uuid", ju ? "expected a string" : "missing");
        return rc;
    }
    if (dup_opt(&l->uuid, json_string_value(ju))) return ENG_ERR_NOMEM;
    if (!jp) {
        hx_errf_at(err, errlen, path, line, "parentUuid", "missing (null for the first line of a conversation)");
        return rc;
    }
    if (!json_is_null(jp) && !json_is_string(jp)) {
        hx_errf_at(err, errlen, path, line, "parentUuid", "expected a string or null");
        return rc;
    }
    const json_t *sc = json_object_get(j, "isSidechain");
    if (sc && !json_is_boolean(sc)) {
        hx_errf_at(err, errlen, path, line, "isSidechain", "expected true or false");
        return rc;
    }
    const json_t *sid = json_object_get(j, "sessionId");
    if (sid && !json_is_string(sid)) {
        hx_errf_at(err, errlen, path, line, "sessionId", "expected a string");
        return rc;
    }
    const json_t *msg = json_object_get(j, "message");
    if (!json_is_object(msg)) {
        hx_errf_at(err, errlen, path, line, "message", msg ? "expected an object" : "missing");
        return rc;
    }
    char f[HX_IMP_FIELD_MAX];
    if (n_big && hx_json_find_big(json_object_get(msg, "content"), "message.content", f, sizeof f)) {
        hx_errf_at(err, errlen, path, line, f, "an integer beyond 2^63-1 (it cannot be kept exactly)");
        return rc;
    }
    const char *role = jstr(msg, "role");
    if (!role || strcmp(role, type)) {
        hx_errf_at(err, errlen, path, line, "message.role", "expected \"%s\" (the line's type)", type);
        return rc;
    }
    l->msg.role = l->kind == CC_USER ? HX_ROLE_USER : HX_ROLE_ASSISTANT;
    if ((rc = hx_blocks_from_json_opts(json_object_get(msg, "content"), path, line, "message.content", &x->bo,
                                       &l->msg.blocks, &l->msg.n_blocks, err, errlen)))
        return rc;
    if (json_is_string(jp) && dup_opt(&l->parent, json_string_value(jp))) return ENG_ERR_NOMEM;
    if (l->kind == CC_ASSISTANT) {
        const char *model = jstr(msg, "model");
        l->synthetic = model && !strcmp(model, "<synthetic>");
        l->api_error_msg = l->synthetic && json_is_true(json_object_get(j, "isApiErrorMessage"));
        if (dup_opt(&l->model, model)) return ENG_ERR_NOMEM;
        const char *rid = jstr(j, "requestId"), *mid = jstr(msg, "id");
        char tmp[40];
        snprintf(tmp, sizeof tmp, "line-%lld", (long long)line);
        if (!(l->req = hx_strdup(rid ? rid : mid ? mid : tmp))) return ENG_ERR_NOMEM;
        const json_t *u = json_object_get(msg, "usage");
        l->usage.prompt_tokens = -1;
        if (json_is_object(u) && !l->synthetic) {
            if (usage_count(u, "input_tokens", &l->usage.input) ||
                usage_count(u, "cache_read_input_tokens", &l->usage.cache_read) ||
                usage_count(u, "cache_creation_input_tokens", &l->usage.cache_creation)) {
                hx_errf_at(err, errlen, path, line, "message.usage", "token counts must be non-negative integers");
                return ENG_ERR_FORMAT;
            }
            l->usage.present = l->usage.input <= INT64_MAX / 4 && l->usage.cache_read <= INT64_MAX / 4 &&
                               l->usage.cache_creation <= INT64_MAX / 4;
        }
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Chains

typedef struct cc_group {
    int32_t *lines;  /* (n) indices of the assistant lines, in file order */
    int32_t  n;
    bool     damaged;  /* one of its lines was skipped */
    int64_t  bad_line; /* the first of them */
} cc_group;

typedef struct cc_log {
    cc_line  *L;
    int32_t   n;
    hx_strmap by_uuid;  /* uuid -> index of its first line */
    int64_t   n_bad;
} cc_log;

/* The effective parent index of line i: -1 at a root, -2 when the parent
 * names no line of the file (*missing = that uuid). */
static int32_t parent_of(const cc_log *g, int32_t i, const char **missing) {
    const cc_line *l = &g->L[i];
    if (l->api_error && l->relink >= 0) return l->relink;
    if (!l->parent) return -1;
    int64_t idx;
    if (!hx_strmap_get(&g->by_uuid, l->parent, &idx)) {
        *missing = l->parent;
        return -2;
    }
    return (int32_t)idx;
}

/* Re-links each late api_error line to the conversation line just before
 * it in the file (same session and sidechain flag), when its recorded
 * parent is an ancestor of that line. */
static int64_t relink_api_errors(cc_log *g) {
    int64_t n = 0;
    for (int32_t i = 0; i < g->n; i++) {
        cc_line *e = &g->L[i];
        e->relink = -1;
        if (!e->api_error || e->dup || !e->parent) continue;
        int32_t j = i - 1;
        for (; j >= 0; j--) {
            const cc_line *c = &g->L[j];
            if (c->bad) break;  /* a skipped line right before: link to it, so what hangs on it is dropped */
            if (c->dup || !c->uuid || c->sidechain != e->sidechain) continue;
            if (c->kind != CC_USER && c->kind != CC_ASSISTANT && c->kind != CC_ATTACH) continue;
            if (e->session_id && c->session_id && strcmp(e->session_id, c->session_id)) continue;
            break;
        }
        if (j < 0 || (g->L[j].uuid && !strcmp(g->L[j].uuid, e->parent))) continue;
        if (g->L[j].bad) {
            e->relink = j;
            continue;
        }
        /* is the recorded parent an ancestor of line j? */
        const char *miss = NULL;
        int32_t k = j;
        for (int32_t steps = 0; k >= 0 && steps <= g->n; steps++) {
            if (g->L[k].uuid && !strcmp(g->L[k].uuid, e->parent)) break;
            k = parent_of(g, k, &miss);
        }
        if (k >= 0) {
            e->relink = j;
            n++;
        }
    }
    return n;
}

typedef struct cc_damage {
    int64_t     line;      /* the call's first line */
    int64_t     lost;      /* the skipped line in its history, or -1 */
    const char *missing;   /* a parentUuid naming no line, or NULL */
    bool        loops;
} cc_damage;

/* Builds the request of group g (prompt from the chain, response from the
 * group). *dmg says why a history is incomplete (ENG_ERR_FORMAT). */
static int cc_request(const cc_log *g, const cc_group *grp, hx_request *q, int32_t *chain, cc_damage *dmg,
                      int32_t *relinked_at) {
    memset(q, 0, sizeof *q);
    memset(dmg, 0, sizeof *dmg);
    dmg->lost = -1;
    *relinked_at = -1;
    q->response.role = HX_ROLE_ASSISTANT;
    q->usage.prompt_tokens = -1;
    const cc_line *L = g->L;
    const cc_line *f = &L[grp->lines[0]];
    q->line = dmg->line = f->lineno;
    /* walk back from the first line's parent */
    int32_t n_chain = 0;
    const char *miss = NULL;
    int32_t cur = parent_of(g, grp->lines[0], &miss);
    while (cur >= 0) {
        if (n_chain >= g->n) {
            dmg->loops = true;
            return ENG_ERR_FORMAT;
        }
        if (L[cur].bad) {
            dmg->lost = L[cur].lineno;
            return ENG_ERR_FORMAT;
        }
        if (L[cur].api_error && L[cur].relink >= 0) *relinked_at = cur;
        chain[n_chain++] = cur;
        cur = parent_of(g, cur, &miss);
    }
    if (cur == -2) {
        dmg->missing = miss;
        return ENG_ERR_FORMAT;
    }
    /* the response: every line of the group must hang on the group's earlier lines */
    for (int32_t k = 1; k < grp->n; k++) {
        int32_t c = parent_of(g, grp->lines[k], &miss);
        for (int32_t steps = 0; c >= 0 && steps <= g->n; steps++) {
            bool in_group = false;
            for (int32_t q2 = 0; q2 < k && !in_group; q2++) in_group = c == grp->lines[q2];
            if (in_group) break;
            if (L[c].bad) {
                dmg->lost = L[c].lineno;
                return ENG_ERR_FORMAT;
            }
            c = parent_of(g, c, &miss);
        }
        if (c == -2) {
            dmg->missing = miss;
            return ENG_ERR_FORMAT;
        }
    }
    if (grp->damaged) {
        dmg->lost = -2;  /* one of its own assistant lines was skipped */
        return ENG_ERR_FORMAT;
    }
    /* replay it forwards: merge assistant lines per request id, consecutive user-side lines */
    const char **keys = NULL;  /* (n_messages) request id of each assistant message, else NULL */
    int rc = ENG_OK;
    for (int32_t c = n_chain - 1; c >= 0 && !rc; c--) {
        const cc_line *l = &L[chain[c]];
        if (l->dup || l->msg.n_blocks == 0 || l->api_error_msg) continue;
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
            if ((rc = hx_request_push_message(q, &m))) break;
            keys[q->n_messages - 1] = l->kind == CC_ASSISTANT ? l->req : NULL;
            target = q->n_messages - 1;
        }
        rc = hx_imp_append_blocks(&q->messages[target], &l->msg);
    }
    free(keys);
    for (int32_t i = 0; i < grp->n && !rc; i++) rc = hx_imp_append_blocks(&q->response, &L[grp->lines[i]].msg);
    if (!rc) rc = hx_call_usage_copy(&q->usage, &f->usage);
    if (rc) hx_request_free(q);
    return rc;
}

// ----------------------------------------------------------------------------
// Sessions and the stand-in

typedef struct cc_session {
    char   *name;
    int32_t first;    /* index of the session's first conversation line (its env) */
    int32_t turns;
    bool    subagent;
    hx_block *sys;    /* the stand-in (or NULL: overrides) */
    int32_t   n_sys;
    hx_tool  *tools;
    int32_t   n_tools;
    char     *context;  /* the stand-in's context reminder (NULL with --system-file) */
} cc_session;

/* Tools the log calls that neither the stand-in nor the deferred list has:
 * schemas inferred from the calls' inputs (property names and JSON types). */
static int called_tools(const cc_log *g, const hx_strmap *deferred, hx_tool **out, int32_t *n_out) {
    static const char *const k_known[] = {"Agent", "Task", "Bash", "Edit", "Glob", "Grep", "Read", "Skill",
                                          "ToolSearch", "Write", "TodoWrite", "WebFetch", "WebSearch",
                                          "NotebookEdit", "AskUserQuestion", "ExitPlanMode"};
    *out = NULL;
    *n_out = 0;
    hx_strmap seen = {0};
    json_t *props = json_object();  /* name -> {prop: type} */
    int rc = props ? ENG_OK : ENG_ERR_NOMEM;
    for (int32_t i = 0; i < g->n && !rc; i++) {
        const cc_line *l = &g->L[i];
        if (l->kind != CC_ASSISTANT || l->bad || l->dup) continue;
        for (int32_t b = 0; b < l->msg.n_blocks && !rc; b++) {
            const hx_block *blk = &l->msg.blocks[b];
            if (blk->type != HX_BLOCK_TOOL_USE || !blk->name) continue;
            bool known = false;
            for (size_t k = 0; k < sizeof k_known / sizeof k_known[0]; k++) known |= !strcmp(blk->name, k_known[k]);
            if (known || hx_strmap_get(deferred, blk->name, NULL)) continue;  /* deferred: reached by tool search */
            json_t *p = json_object_get(props, blk->name);
            if (!p) {
                p = json_object();
                if (!p || json_object_set_new(props, blk->name, p)) { rc = ENG_ERR_NOMEM; break; }
                if ((rc = hx_strmap_put(&seen, blk->name, (int64_t)json_object_size(props) - 1))) break;
            }
            json_error_t je;
            json_t *in = json_loadb(blk->input, strlen(blk->input), 0, &je);
            const char *k;
            json_t *v;
            json_object_foreach(in, k, v) {
                const char *t = json_is_string(v) ? "string" : json_is_boolean(v) ? "boolean"
                                : json_is_integer(v) ? "integer" : json_is_number(v) ? "number"
                                : json_is_array(v) ? "array" : json_is_object(v) ? "object" : "null";
                if (!json_object_get(p, k)) json_object_set_new(p, k, json_pack("{s:s}", "type", t));
            }
            json_decref(in);
        }
    }
    if (!rc && json_object_size(props)) {
        *out = calloc(json_object_size(props), sizeof **out);
        if (!*out) rc = ENG_ERR_NOMEM;
        const char *name;
        json_t *p;
        json_object_foreach(props, name, p) {
            if (rc) break;
            hx_tool *t = &(*out)[(*n_out)++];
            json_t *schema = json_pack("{s:s,s:O}", "type", "object", "properties", p);
            char desc[512];
            snprintf(desc, sizeof desc, "%.300s (a tool this log calls; its definition is not in the log, so this "
                                        "stand-in lists only the parameters its calls use)", name);
            t->name = hx_strdup(name);
            t->description = hx_strdup(desc);
            t->schema = schema ? hx_json_canonical(schema) : NULL;
            json_decref(schema);
            if (!t->name || !t->description || !t->schema) rc = ENG_ERR_NOMEM;
        }
    }
    json_decref(props);
    hx_strmap_free(&seen);
    return rc;
}

static void cc_session_free(cc_session *s) {
    free(s->name);
    hx_imp_free_blocks(s->sys, s->n_sys);
    hx_imp_free_tools(s->tools, s->n_tools);
    free(s->context);
}

// ----------------------------------------------------------------------------
// The import

static int push_note(hx_request *q, const char *note) {
    json_error_t je;
    json_t *a = q->notes ? json_loadb(q->notes, strlen(q->notes), 0, &je) : json_array();
    if (!a || json_array_append_new(a, json_string(note))) {
        json_decref(a);
        return ENG_ERR_NOMEM;
    }
    char *s = hx_json_canonical(a);
    json_decref(a);
    if (!s) return ENG_ERR_NOMEM;
    free(q->notes);
    q->notes = s;
    return ENG_OK;
}

/* Puts the context reminder first in the first message (a user message;
 * one is made when the history starts otherwise). */
static int prepend_context(hx_request *q, const char *context) {
    if (q->n_messages == 0 || q->messages[0].role != HX_ROLE_USER) {
        hx_message *nm = realloc(q->messages, (size_t)(q->n_messages + 1) * sizeof *nm);
        if (!nm) return ENG_ERR_NOMEM;
        q->messages = nm;
        memmove(&q->messages[1], &q->messages[0], (size_t)q->n_messages * sizeof *nm);
        q->messages[0] = (hx_message){HX_ROLE_USER, NULL, 0};
        q->n_messages++;
    }
    hx_message *m = &q->messages[0];
    hx_block *nb = realloc(m->blocks, (size_t)(m->n_blocks + 1) * sizeof *nb);
    if (!nb) return ENG_ERR_NOMEM;
    m->blocks = nb;
    memmove(&m->blocks[1], &m->blocks[0], (size_t)m->n_blocks * sizeof *nb);
    m->n_blocks++;
    return hx_block_init(&m->blocks[0], HX_BLOCK_TEXT, context, NULL, NULL, NULL, false);
}

static int import_claude_code(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                              int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    hx_import_stats local = {0};
    cc_ctx x = {o, path, data, n, o->stats ? o->stats : &local, {0}, false, {0}};
    x.bo.lenient = true;
    x.bo.drop_empty_thinking = true;
    cc_log g = {0};
    int32_t cap = 0;
    hx_strmap by_req = {0}, sess_of = {0}, side_roots = {0};
    cc_group *groups = NULL;
    int32_t n_groups = 0;
    cc_session *S = NULL;
    int32_t n_sess = 0;
    int32_t *chain = NULL;
    hx_tool *extra = NULL;
    int32_t n_extra = 0;
    int rc = ENG_OK;
    size_t pos = 0;
    int64_t lineno = 0;
    const char *s;
    size_t len;
    /* 1. parse every line */
    while (hx_imp_next_line(data, n, &pos, &lineno, &s, &len)) {
        if (g.n == INT32_MAX - 1) { rc = ENG_ERR_RANGE; goto out; }
        size_t n_big = 0;
        json_t *j = hx_imp_load_line(data, n, s, len, path, lineno, &n_big, err, errlen);
        cc_line l;
        memset(&l, 0, sizeof l);
        l.lineno = lineno;
        l.relink = -1;
        rc = ENG_ERR_FORMAT;
        if (j) {
            rc = cc_parse_line(&x, j, n_big, lineno, &l, err, errlen);
            if (rc == ENG_OK) x.st->big_integers += (int64_t)n_big;
        }
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            /* kept as a hole in the chain: what of it is readable says who lost it */
            cc_line_free(&l);
            memset(&l, 0, sizeof l);
            l.lineno = lineno;
            l.relink = -1;
            l.bad = true;
            l.why = hx_strdup(err);
            const char *u = j ? jstr(j, "uuid") : NULL, *t = j ? jstr(j, "type") : NULL;
            if (u) l.uuid = hx_strdup(u);
            if (t && !strcmp(t, "assistant")) {
                const char *rid = jstr(j, "requestId");
                const char *mid = jstr(json_object_get(j, "message"), "id");
                if (rid || mid) l.req = hx_strdup(rid ? rid : mid);
            }
            (*n_skipped)++;
            rc = ENG_OK;
        }
        json_decref(j);
        if (rc) {
            cc_line_free(&l);
            goto out;
        }
        if (g.n == cap) {
            int32_t ncap = cap ? cap * 2 : 64;
            cc_line *nl = realloc(g.L, (size_t)ncap * sizeof *nl);
            if (!nl) { cc_line_free(&l); rc = ENG_ERR_NOMEM; goto out; }
            g.L = nl;
            cap = ncap;
        }
        g.L[g.n] = l;
        if (l.bad) g.n_bad++;
        if (l.uuid) {
            if (hx_strmap_get(&g.by_uuid, l.uuid, NULL)) g.L[g.n].dup = true;
            else if ((rc = hx_strmap_put(&g.by_uuid, l.uuid, g.n))) { g.n++; goto out; }
        }
        g.n++;
    }
    x.st->unknown_blocks += x.bo.n_unknown;
    x.st->empty_thinking += x.bo.n_empty_thinking;
    x.st->tool_references += x.bo.n_tool_reference;
    if (x.bo.unknown_types[0]) snprintf(x.st->unknown_types, sizeof x.st->unknown_types, "%s", x.bo.unknown_types);
    x.st->relinked += relink_api_errors(&g);
    /* 2. group the assistant lines by request id, in order of first appearance */
    for (int32_t i = 0; i < g.n; i++) {
        cc_line *l = &g.L[i];
        if (l->kind == CC_ASSISTANT && l->synthetic && !l->dup) {
            x.st->synthetic++;
            if (l->api_error_msg) x.st->api_error_messages++;
        }
        if (!l->req || l->dup || l->synthetic || (l->kind != CC_ASSISTANT && !l->bad)) continue;
        int64_t gi;
        if (!hx_strmap_get(&by_req, l->req, &gi)) {
            cc_group *ng = realloc(groups, (size_t)(n_groups + 1) * sizeof *ng);
            if (!ng) { rc = ENG_ERR_NOMEM; goto out; }
            groups = ng;
            groups[n_groups] = (cc_group){NULL, 0, false, 0};
            gi = n_groups++;
            if ((rc = hx_strmap_put(&by_req, l->req, gi))) goto out;
        }
        if (l->bad) {
            if (!groups[gi].damaged) groups[gi].bad_line = l->lineno;
            groups[gi].damaged = true;
            continue;
        }
        int32_t *nl = realloc(groups[gi].lines, (size_t)(groups[gi].n + 1) * sizeof *nl);
        if (!nl) { rc = ENG_ERR_NOMEM; goto out; }
        groups[gi].lines = nl;
        groups[gi].lines[groups[gi].n++] = i;
    }
    if (!(chain = malloc((size_t)(g.n ? g.n : 1) * sizeof *chain))) { rc = ENG_ERR_NOMEM; goto out; }
    if (!o->tools_file && (rc = called_tools(&g, &x.deferred_names, &extra, &n_extra))) goto out;
    /* 3. one request per group */
    for (int32_t gi = 0; gi < n_groups; gi++) {
        hx_request q;
        cc_damage dmg;
        int32_t relinked_at;
        if (groups[gi].n == 0) { /* every line of the call was skipped */
            memset(&dmg, 0, sizeof dmg);
            dmg.line = groups[gi].bad_line;
            dmg.lost = -2;
            rc = ENG_ERR_FORMAT;
        } else {
            rc = cc_request(&g, &groups[gi], &q, chain, &dmg, &relinked_at);
        }
        if (rc == ENG_ERR_FORMAT) {
            char why[600];
            if (dmg.loops) snprintf(why, sizeof why, "the parentUuid chain loops");
            else if (dmg.missing)
                snprintf(why, sizeof why, "the chain reaches parentUuid \"%.200s\", which names no line of this file "
                                          "(the history before it is missing)", dmg.missing);
            else if (dmg.lost == -2) snprintf(why, sizeof why, "a line of its response was skipped (line %lld)",
                                              (long long)groups[gi].bad_line);
            else snprintf(why, sizeof why, "its history lost line %lld (skipped)", (long long)dmg.lost);
            hx_errf_at(err, errlen, path, dmg.line, "parentUuid", "%s", why);
            if (!o->skip_bad) goto out;
            x.st->dropped_requests++;
            if (x.st->report)
                fprintf(x.st->report, "kvreplay import: %s:%lld: dropped the request: %s\n", path,
                        (long long)dmg.line, why);
            rc = ENG_OK;
            continue;
        }
        if (rc) goto out;
        const cc_line *f = &g.L[groups[gi].lines[0]];
        /* the session: the main chain, or a sidechain (subagent) by its root */
        char name[600];
        const char *main_name = o->session ? o->session : f->session_id ? f->session_id : "claude-code";
        int32_t first = groups[gi].lines[0];
        if (f->sidechain) {
            int32_t root = groups[gi].lines[0];
            const char *miss;
            for (int32_t steps = 0; steps < g.n; steps++) {
                int32_t p = parent_of(&g, root, &miss);
                if (p < 0 || !g.L[p].sidechain) break;
                root = p;
            }
            first = root;
            if (f->agent_id) {
                snprintf(name, sizeof name, "%.400s/agent-%.100s", main_name, f->agent_id);
            } else {
                int64_t k;
                const char *key = g.L[root].uuid ? g.L[root].uuid : "";
                if (!hx_strmap_get(&side_roots, key, &k)) {
                    k = (int64_t)side_roots.n;
                    if ((rc = hx_strmap_put(&side_roots, key, k))) { hx_request_free(&q); goto out; }
                }
                snprintf(name, sizeof name, "%.500s/sidechain-%lld", main_name, (long long)k);
            }
        } else {
            snprintf(name, sizeof name, "%.500s", main_name);
            /* the env of the main session: its first conversation line */
            for (int32_t i = 0; i < g.n; i++)
                if (!g.L[i].sidechain && !g.L[i].bad && (g.L[i].kind == CC_USER || g.L[i].kind == CC_ASSISTANT) &&
                    g.L[i].session_id && f->session_id && !strcmp(g.L[i].session_id, f->session_id)) {
                    first = i;
                    break;
                }
        }
        int64_t si_idx;
        if (!hx_strmap_get(&sess_of, name, &si_idx)) {
            cc_session *ns = realloc(S, (size_t)(n_sess + 1) * sizeof *ns);
            if (!ns) { hx_request_free(&q); rc = ENG_ERR_NOMEM; goto out; }
            S = ns;
            memset(&S[n_sess], 0, sizeof S[n_sess]);
            S[n_sess].first = first;
            S[n_sess].subagent = f->sidechain;
            if (!(S[n_sess].name = hx_strdup(name))) { hx_request_free(&q); rc = ENG_ERR_NOMEM; goto out; }
            si_idx = n_sess++;
            if ((rc = hx_strmap_put(&sess_of, name, si_idx))) { hx_request_free(&q); goto out; }
            if (!o->system_file || !o->tools_file) {
                const cc_line *e = &g.L[first];
                const char *model = f->model;
                hx_cc_env env = {e->version ? e->version : f->version, e->entrypoint, e->session_id,
                                 e->cwd ? e->cwd : f->cwd, e->date[0] ? e->date : NULL, model,
                                 e->git_branch ? e->git_branch : f->git_branch, x.deferred, f->sidechain,
                                 extra, n_extra};
                if ((rc = hx_cc_standin(&env, &S[si_idx].sys, &S[si_idx].n_sys, &S[si_idx].tools,
                                        &S[si_idx].n_tools, &S[si_idx].context))) {
                    hx_request_free(&q);
                    goto out;
                }
                if (f->sidechain) x.st->sidechain_sessions++;
                if (o->system_file) S[si_idx].context = (free(S[si_idx].context), NULL);
            }
        }
        cc_session *ss = &S[si_idx];
        q.turn = ss->turns++;
        if (!(q.session = hx_strdup(name))) { hx_request_free(&q); rc = ENG_ERR_NOMEM; goto out; }
        /* the prompt's prefix: the overrides, else the session's stand-in */
        hx_imp_standin part = {o->system_file ? si->system : ss->sys, o->system_file ? si->n_system : ss->n_sys,
                               o->tools_file ? si->tools : ss->tools, o->tools_file ? si->n_tools : ss->n_tools,
                               !o->system_file};
        rc = hx_imp_standin_apply(&part, &q, f->req);
        if (!rc && ss->context) rc = prepend_context(&q, ss->context);
        if (!rc && relinked_at >= 0 && !g.L[relinked_at].noted) {
            g.L[relinked_at].noted = true;
            char note[200];
            snprintf(note, sizeof note, "the first request through the late api_error line %lld, re-linked to line %lld",
                     (long long)g.L[relinked_at].lineno, (long long)g.L[g.L[relinked_at].relink].lineno);
            rc = push_note(&q, note);
        }
        if (rc || (rc = hx_transcript_push(out, &q))) {
            hx_request_free(&q);
            goto out;
        }
    }
    if (n_groups == 0 && g.n > 0 && !o->skip_bad) {
        bool any_conv = false;
        for (int32_t i = 0; i < g.n && !any_conv; i++) any_conv = g.L[i].kind == CC_USER || g.L[i].kind == CC_ASSISTANT;
        if (!any_conv) {
            hx_errf_at(err, errlen, path, 0, NULL, "no Claude Code conversation lines (\"type\": \"user\" or "
                       "\"assistant\" with a message); is this a Claude Code session log?");
            rc = ENG_ERR_FORMAT;
            goto out;
        }
    }
    rc = ENG_OK;
out:
    for (int32_t i = 0; i < g.n; i++) cc_line_free(&g.L[i]);
    free(g.L);
    for (int32_t i = 0; i < n_groups; i++) free(groups[i].lines);
    free(groups);
    for (int32_t i = 0; i < n_sess; i++) cc_session_free(&S[i]);
    free(S);
    hx_imp_free_tools(extra, n_extra);
    free(chain);
    hx_strmap_free(&g.by_uuid);
    hx_strmap_free(&by_req);
    hx_strmap_free(&sess_of);
    hx_strmap_free(&side_roots);
    hx_strmap_free(&x.deferred_names);
    return rc;
}

const hx_importer hx_importer_claude_code = {
    .name = "claude-code",
    .help = "a Claude Code session log (~/.claude/projects/<project>/<session>.jsonl)",
    .own_prefix = true,
    .import = import_claude_code,
};
