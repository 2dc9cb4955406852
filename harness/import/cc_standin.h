/*
 * harness/import/cc_standin.h: the stand-in for what a Claude Code log
 * leaves out: the system prompt and the tool definitions of every request.
 *
 * A Claude Code session log holds the conversation, never the system prompt
 * or the tools the client sent with it. The stand-in has their shape and,
 * on the logs measured in docs/transcripts.md, their size; its words are
 * kvreplay's own (generated prose), never Claude Code's. System blocks:
 *   [0] the billing header "x-anthropic-billing-header: cc_version=V.FFF;
 *       cc_entrypoint=E; cch=00000;" with V and E from the log (version,
 *       entrypoint), FFF a per-session fingerprint (XXH3 of the sessionId),
 *       and the checksum set per request by hx_cc_billing_cch;
 *   [1] the identity line "You are Claude Code, Anthropic's official CLI for
 *       Claude.";
 *   [2] the instructions: generated prose of HX_CC_INSTRUCTION_BYTES bytes
 *       (a subagent's: HX_CC_SUBAGENT_INSTRUCTION_BYTES);
 *   [3] the environment: working directory (the log's cwd), whether it is a
 *       git repository and its branch (gitBranch), platform (from the cwd's
 *       form), the date of the session's first line, and the model.
 * Context: Claude Code puts the user's context (the CLAUDE.md files, today's
 * date) into a <system-reminder> at the start of the first user message of
 * every request; the log does not record it. The stand-in's context
 * reminder holds generated project instructions of HX_CC_CONTEXT_BYTES
 * bytes and the date of the session's first line; the importer puts it
 * first in the first user message.
 * Tools: the core tools of the log's era with realistic schemas (their
 * parameter names are those the logs' tool calls use) and descriptions of
 * realistic length (a purpose sentence, then generated usage notes): with
 * deferred tools (the log announces them, Claude Code's tool search) Agent,
 * Bash, Edit, Glob, Grep, Read, Skill, ToolSearch, Write; without, also
 * TodoWrite, WebFetch, WebSearch, NotebookEdit, AskUserQuestion and
 * ExitPlanMode; a subagent gets no Agent tool. Tools the log calls that are
 * neither in the set nor announced as deferred are appended (the caller
 * passes them, with schemas inferred from the calls).
 *
 * The result is a pure function of the env: the same log gives the same
 * stand-in on every run.
 */
#ifndef HX_CC_STANDIN_H
#define HX_CC_STANDIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transcript.h"

/* Sizes (bytes) of the generated instruction prose: together with the tool
 * descriptions they make system + tools about 16K tokens, what the first
 * request of a fresh session reads from the prompt cache in the logs of
 * Claude Code 2.1.112-2.1.126 (docs/transcripts.md). */
#define HX_CC_INSTRUCTION_BYTES          30000
#define HX_CC_SUBAGENT_INSTRUCTION_BYTES 4000
/* Size (bytes) of the generated project-instructions text of the context
 * reminder: the part of the first request the log cannot show (CLAUDE.md
 * files and the like) is about 3-8K tokens in the measured logs. */
#define HX_CC_CONTEXT_BYTES              12000

typedef struct hx_cc_env {
    const char    *version;     /* the log's version ("2.1.112"); NULL: "2.1.101" */
    const char    *entrypoint;  /* the log's entrypoint ("cli", "claude-vscode"); NULL: "cli" */
    const char    *session_id;  /* seeds the fingerprint; NULL: "" */
    const char    *cwd;         /* the session's working directory; NULL: "/home/user/project" */
    const char    *date;        /* "YYYY-MM-DD" of the session's first line; NULL: not stated */
    const char    *model;       /* the model of the session's first call; NULL: not stated */
    const char    *git_branch;  /* NULL or "": not a git repository */
    bool           deferred_tools;  /* the log announces deferred tools (tool search era) */
    bool           subagent;        /* a sidechain (subagent) request */
    const hx_tool *extra;       /* tools appended after the stand-in's own (borrowed) */
    int32_t        n_extra;
} hx_cc_env;

/* Builds the stand-in system blocks (4 TEXT blocks, billing checksum
 * "00000") and tools into malloc'd arrays the caller frees (hx_block_free /
 * hx_tool_free each, then free), and the context reminder's text into
 * *context (malloc'd). Returns ENG_OK or ENG_ERR_NOMEM. */
int  hx_cc_standin(const hx_cc_env *e, hx_block **system, int32_t *n_system, hx_tool **tools, int32_t *n_tools,
                   char **context);

/* Sets the `cch=` value of a billing header text (a malloc'd string,
 * reallocated) to the first 5 hex digits of XXH3-64(req_id), as the real
 * client draws a new checksum per request. Returns ENG_OK or ENG_ERR_NOMEM;
 * a text without "cch=" is left as it is. */
int  hx_cc_billing_cch(char **text, const char *req_id);

/* The platform Claude Code would report for a working directory:
 * "darwin" (/Users/...), "win32" (C:\...), else "linux". */
const char *hx_cc_platform(const char *cwd);

#endif /* HX_CC_STANDIN_H */
