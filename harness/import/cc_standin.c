/*
 * harness/import/cc_standin.c: the Claude Code stand-in system prompt
 * and tools (see cc_standin.h).
 *
 * Tool description sizes follow the relative sizes of Claude Code's own
 * tool descriptions (Bash, with its git and commit guidance, is by far the
 * longest; Glob the shortest); the words are a purpose sentence written here
 * plus generated usage notes (hx_synth_instruction_text), so no prose of
 * Claude Code is reproduced. Schemas: the agent scenario's table
 * (synth_transcript.c) for the tools it has, the table below for the others.
 */
#include "cc_standin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "json.h"
#include "status.h"
#include "str.h"
#include "synth_transcript.h"
#include "util.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The stand-in's tool set. schema NULL: taken from the agent scenario's
 * table under the name `like`. era: 0 always, 1 only without deferred tools. */
static const struct {
    const char *name, *like, *purpose, *schema;
    int64_t     bytes;  /* target description bytes */
    int         era;
    bool        main_only;  /* not given to subagents */
} k_standin_tools[] = {
    {"Agent", "Task",
     "Launches a subagent that works through a task on its own, with its own context and tools, and returns one "
     "final report.", NULL, 8000, 0, true},
    {"Bash", "Bash",
     "Runs a shell command in a persistent session and returns its output.", NULL, 14000, 0, false},
    {"Edit", "Edit", "Replaces an exact string in a file with another.", NULL, 1600, 0, false},
    {"Glob", "Glob", "Finds files whose paths match a glob pattern.", NULL, 700, 0, false},
    {"Grep", "Grep", "Searches file contents with a regular expression.", NULL, 1800, 0, false},
    {"Read", "Read", "Reads a file from the local filesystem.", NULL, 2000, 0, false},
    {"Skill", NULL, "Runs one of the skills listed in the conversation, by name, with optional arguments.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"args\":{\"description\":\"Arguments for the skill\",\"type\":\"string\"},"
     "\"skill\":{\"description\":\"The skill's name\",\"type\":\"string\"}},\"required\":[\"skill\"],\"type\":\"object\"}",
     2000, 0, false},
    {"ToolSearch", NULL,
     "Loads the definitions of deferred tools, by exact name (select:A,B) or by keywords, so they can be called.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"max_results\":{\"default\":5,\"description\":\"How many tools to return\",\"type\":\"number\"},"
     "\"query\":{\"description\":\"select:NAME[,NAME...] or keywords\",\"type\":\"string\"}},"
     "\"required\":[\"query\"],\"type\":\"object\"}",
     1600, -1, false},
    {"Write", "Write", "Writes a file, replacing it when it exists.", NULL, 1100, 0, false},
    {"TodoWrite", "TodoWrite", "Keeps a structured todo list for the session.", NULL, 8000, 1, false},
    {"WebFetch", "WebFetch", "Fetches a web page and answers a question about it.", NULL, 1800, 1, false},
    {"WebSearch", NULL, "Searches the web and returns result titles, links and snippets.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"allowed_domains\":{\"items\":{\"type\":\"string\"},\"type\":\"array\"},"
     "\"blocked_domains\":{\"items\":{\"type\":\"string\"},\"type\":\"array\"},"
     "\"query\":{\"description\":\"The search query\",\"minLength\":2,\"type\":\"string\"}},"
     "\"required\":[\"query\"],\"type\":\"object\"}",
     1300, 1, false},
    {"NotebookEdit", NULL, "Replaces, inserts or deletes a cell of a Jupyter notebook.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"cell_id\":{\"type\":\"string\"},\"cell_type\":{\"enum\":[\"code\",\"markdown\"],\"type\":\"string\"},"
     "\"edit_mode\":{\"enum\":[\"replace\",\"insert\",\"delete\"],\"type\":\"string\"},"
     "\"new_source\":{\"type\":\"string\"},\"notebook_path\":{\"type\":\"string\"}},"
     "\"required\":[\"notebook_path\",\"new_source\"],\"type\":\"object\"}",
     900, 1, false},
    {"AskUserQuestion", NULL, "Asks the user one to four multiple-choice questions and waits for the answers.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"questions\":{\"items\":{\"properties\":{\"header\":{\"type\":\"string\"},"
     "\"multiSelect\":{\"type\":\"boolean\"},\"options\":{\"items\":{\"properties\":{\"description\":{\"type\":\"string\"},"
     "\"label\":{\"type\":\"string\"}},\"required\":[\"label\",\"description\"],\"type\":\"object\"},\"type\":\"array\"},"
     "\"question\":{\"type\":\"string\"}},\"required\":[\"question\",\"header\",\"options\",\"multiSelect\"],"
     "\"type\":\"object\"},\"maxItems\":4,\"minItems\":1,\"type\":\"array\"}},\"required\":[\"questions\"],\"type\":\"object\"}",
     900, 1, true},
    {"ExitPlanMode", NULL, "Presents the finished plan to the user for approval and leaves plan mode.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"plan\":{\"description\":\"The plan, in markdown\",\"type\":\"string\"}},"
     "\"required\":[\"plan\"],\"type\":\"object\"}",
     2600, 1, true},
};

static const char k_identity[] = "You are Claude Code, Anthropic's official CLI for Claude.";

const char *hx_cc_platform(const char *cwd) {
    if (!cwd) return "linux";
    if (!strncmp(cwd, "/Users/", 7)) return "darwin";
    if (((cwd[0] >= 'A' && cwd[0] <= 'Z') || (cwd[0] >= 'a' && cwd[0] <= 'z')) && cwd[1] == ':') return "win32";
    return "linux";
}

int hx_cc_billing_cch(char **text, const char *req_id) {
    const char *at = *text ? strstr(*text, "cch=") : NULL;
    if (!at || !req_id) return ENG_OK;
    const char *end = at + 4;
    while (*end && *end != ';') end++;
    char hex[8];
    snprintf(hex, sizeof hex, "%05llx", (unsigned long long)(XXH3_64bits(req_id, strlen(req_id)) >> 44));
    size_t head = (size_t)(at + 4 - *text), tail = strlen(end);
    char *t = malloc(head + 5 + tail + 1);
    if (!t) return ENG_ERR_NOMEM;
    memcpy(t, *text, head);
    memcpy(t + head, hex, 5);
    memcpy(t + head + 5, end, tail + 1);
    free(*text);
    *text = t;
    return ENG_OK;
}

static char *env_text(const hx_cc_env *e) {
    eng_buf b = {0};
    bool git = e->git_branch && e->git_branch[0];
    int rc = eng_buf_printf(&b, "Facts about the environment of this session:\n<env>\nWorking directory: %s\n"
                                "Is the directory a git repository: %s\nPlatform: %s\n",
                            e->cwd ? e->cwd : "/home/user/project", git ? "yes" : "no", hx_cc_platform(e->cwd));
    if (!rc && e->date) rc = eng_buf_printf(&b, "Today's date: %s\n", e->date);
    if (!rc) rc = eng_buf_printf(&b, "</env>\n");
    if (!rc && e->model) rc = eng_buf_printf(&b, "The model answering is %s.\n", e->model);
    if (!rc && git)
        rc = eng_buf_printf(&b, "\ngit status when the session started (it is not updated while you work):\n"
                                "Current branch: %s\n(the status and recent commits are not in the log)\n",
                            e->git_branch);
    if (rc) {
        eng_buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* description = purpose + "\n\n" + generated notes, about `bytes` long in all */
static char *tool_description(const char *purpose, int64_t bytes, uint64_t index) {
    int64_t rest = bytes - (int64_t)strlen(purpose) - 2;
    char *notes = rest > 0 ? hx_synth_instruction_text(11, index, rest, false) : hx_strdup("");
    if (!notes) return NULL;
    eng_buf b = {0};
    int rc = eng_buf_printf(&b, "%s%s%s", purpose, notes[0] ? "\n\n" : "", notes);
    free(notes);
    if (rc) {
        eng_buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* The context reminder: generated project instructions and the date. */
static char *context_text(const hx_cc_env *e) {
    char *instr = hx_synth_instruction_text(13, 0, HX_CC_CONTEXT_BYTES, false);
    if (!instr) return NULL;
    eng_buf b = {0};
    int rc = eng_buf_printf(&b, "<system-reminder>\nContext for the user's requests. It may or may not be relevant; "
                                "use it only where it applies.\n\n# Project instructions (CLAUDE.md)\n%s\n", instr);
    if (!rc && e->date) rc = eng_buf_printf(&b, "\n# Date\nToday's date is %s.\n", e->date);
    if (!rc) rc = eng_buf_printf(&b, "</system-reminder>");
    free(instr);
    if (rc) {
        eng_buf_free(&b);
        return NULL;
    }
    return b.data;
}

int hx_cc_standin(const hx_cc_env *e, hx_block **system, int32_t *n_system, hx_tool **tools, int32_t *n_tools,
                  char **context) {
    *system = NULL;
    *tools = NULL;
    *n_system = *n_tools = 0;
    if (!(*context = context_text(e))) return ENG_ERR_NOMEM;
    hx_tool *base = NULL, *ts = NULL;
    int32_t n_base = 0, nt = 0;
    hx_block *sys = calloc(4, sizeof *sys);
    char *instr = NULL, *env = NULL;
    int rc = ENG_ERR_NOMEM;
    if (!sys) goto out;
    /* system blocks */
    const char *sid = e->session_id ? e->session_id : "";
    char hdr[256];
    snprintf(hdr, sizeof hdr, "x-anthropic-billing-header: cc_version=%.64s.%03llx; cc_entrypoint=%.64s; cch=00000;",
             e->version ? e->version : "2.1.101", (unsigned long long)(XXH3_64bits(sid, strlen(sid)) >> 52),
             e->entrypoint ? e->entrypoint : "cli");
    instr = hx_synth_instruction_text(7, e->subagent ? 1 : 0,
                                      e->subagent ? HX_CC_SUBAGENT_INSTRUCTION_BYTES : HX_CC_INSTRUCTION_BYTES, true);
    env = env_text(e);
    if (!instr || !env || hx_block_init(&sys[0], HX_BLOCK_TEXT, hdr, NULL, NULL, NULL, false) ||
        hx_block_init(&sys[1], HX_BLOCK_TEXT, k_identity, NULL, NULL, NULL, false) ||
        hx_block_init(&sys[2], HX_BLOCK_TEXT, instr, NULL, NULL, NULL, false) ||
        hx_block_init(&sys[3], HX_BLOCK_TEXT, env, NULL, NULL, NULL, false))
        goto out;
    /* tools */
    if (hx_synth_agent_tools(&base, &n_base)) goto out;
    if (!(ts = calloc(N_OF(k_standin_tools) + (size_t)(e->n_extra > 0 ? e->n_extra : 0), sizeof *ts))) goto out;
    for (size_t i = 0; i < N_OF(k_standin_tools); i++) {
        int era = k_standin_tools[i].era;
        if ((era == 1 && e->deferred_tools) || (era == -1 && !e->deferred_tools)) continue;
        if (k_standin_tools[i].main_only && e->subagent) continue;
        const char *schema = k_standin_tools[i].schema;
        for (int32_t k = 0; !schema && k < n_base; k++)
            if (!strcmp(base[k].name, k_standin_tools[i].like)) schema = base[k].schema;
        hx_tool *t = &ts[nt++];
        t->name = hx_strdup(k_standin_tools[i].name);
        t->description = tool_description(k_standin_tools[i].purpose, k_standin_tools[i].bytes, i);
        t->schema = schema ? hx_json_canonical_text(schema, strlen(schema)) : hx_strdup("{}");
        if (!t->name || !t->description || !t->schema) goto out;
    }
    for (int32_t i = 0; i < e->n_extra; i++)
        if (hx_tool_copy(&ts[nt++], &e->extra[i])) goto out;
    *system = sys;
    *n_system = 4;
    *tools = ts;
    *n_tools = nt;
    sys = NULL;
    ts = NULL;
    rc = ENG_OK;
out:
    if (sys)
        for (int i = 0; i < 4; i++) hx_block_free(&sys[i]);
    free(sys);
    if (ts)
        for (int32_t i = 0; i < nt; i++) hx_tool_free(&ts[i]);
    free(ts);
    for (int32_t i = 0; i < n_base; i++) hx_tool_free(&base[i]);
    free(base);
    free(instr);
    if (rc) {
        free(*context);
        *context = NULL;
    }
    free(env);
    return rc;
}
