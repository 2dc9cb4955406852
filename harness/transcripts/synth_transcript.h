/*
 * harness/transcripts/synth_transcript.h: seeded synthetic transcripts (`kvreplay synth-transcript`).
 *
 * Two scenarios, both a pure function of their parameters (GSL mt19937
 * streams derived from the seed; same parameters -> byte-identical file):
 *
 *   agent   Coding-agent sessions shaped like Claude Code (seeds/000_*, 001_*).
 *           Every request starts with a long stable prefix: system blocks
 *             [0] "x-anthropic-billing-header: cc_version=2.1.101.e51;
 *                  cc_entrypoint=cli; cch=XXXXX;" with a fresh 5-hex checksum
 *                  on EVERY request (all distinct within a file),
 *             [1] "You are Claude Code, Anthropic's official CLI for Claude."
 *                  followed by a long generated instruction text,
 *             [2] an environment block holding a <git-status> snapshot
 *                  (branch, modified files, recent commits),
 *           plus tool definitions (Bash, Read, Edit, Write, Grep, Glob,
 *           TodoWrite, WebFetch, Task). Then the conversation: a user task,
 *           assistant turns (optional thinking, text, tool_use), user turns
 *           with tool_result blocks (file contents, command output, diffs),
 *           growing by one exchange per request. A response commits with
 *           probability commit_rate; the git-status block then changes:
 *             - default: each session works in its own repository and sees
 *               the new block from its next request on (the harness rewrote
 *               it inside the stable prefix);
 *             - fresh_sessions: all sessions work one after another in one
 *               repository; each takes a snapshot when it starts, so the
 *               block changes between sessions after a commit and fresh
 *               sessions otherwise share the whole stable prefix.
 *   extend  Each request extends the previous one (seeds/003_*: git-diff
 *           summarisation): request t+1 = request t + its response + a new
 *           chunk of diff + a question; as messages (default) or raw prompts.
 *   static  One large static context (base_bytes of diff) and a different
 *           short question on every request (seeds/004's "large static
 *           context + small varying query"); requests share the system turn
 *           and the context, not each other's questions or answers.
 *
 * Sizes: system_bytes counts the system blocks plus the tool definitions
 * (name + description + schema); the instruction text is generated to fill
 * it. system tokens ~ system bytes / 4 for English BPE vocabularies.
 */
#ifndef HX_SYNTH_TRANSCRIPT_H
#define HX_SYNTH_TRANSCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transcript.h"

typedef enum hx_synth_scenario {
    HX_SYNTH_AGENT  = 0,
    HX_SYNTH_EXTEND = 1,
    HX_SYNTH_STATIC = 2,  /* one large static context, a different short question per request (seeds/004) */
} hx_synth_scenario;

typedef struct hx_synth_params {
    hx_synth_scenario scenario;
    uint64_t seed;              /* default 0 */
    int32_t  sessions;          /* sessions (default: agent 2, extend 1) */
    int32_t  turns;             /* requests per session (default: agent 6, extend 8) */
    /* agent */
    int64_t  system_bytes;      /* approx bytes of system blocks + tool definitions (default 24000) */
    int64_t  tool_result_bytes; /* approx bytes of a large tool result (Read, Bash) (default 2000) */
    double   commit_rate;       /* probability that a non-final response commits (default 0.1) */
    bool     fresh_sessions;    /* one repository, sessions one after another (default false) */
    bool     interleave;        /* emit the sessions' requests round-robin (default false; not with fresh_sessions) */
    bool     env_last;          /* tool definitions inside the system prompt and the environment (git-status)
                                   block last, so it ends the stable prefix as in seeds/000 (default false) */
    /* extend */
    int64_t  base_bytes;        /* diff bytes in the first request (default 4096) */
    int64_t  step_bytes;        /* diff bytes added by each later request (default 1024) */
    bool     prompt_lines;      /* raw `prompt` lines instead of messages (default false) */
} hx_synth_params;

/* Fills p with the defaults of scenario s. */
void hx_synth_params_init(hx_synth_params *p, hx_synth_scenario s);
/* "agent" / "extend" -> scenario (>= 0), or ENG_ERR_NOT_FOUND. */
int  hx_synth_scenario_from_name(const char *name);

/* Generates the transcript described by p into *out (zeroed first; the
 * caller frees it with hx_transcript_free; out->path is NULL). Returns
 * ENG_OK, ENG_ERR_ARG (a parameter out of range; err names it, e.g.
 * "--turns: must be in [1, 100000]") or ENG_ERR_NOMEM. Session names are
 * "agent-000", "agent-001", ... / "extend-000", ...; turns count from 0. */
int  hx_synth_transcript(const hx_synth_params *p, hx_transcript *out, char *err, size_t errlen);

/* The agent scenario's stable prefix for repository 0 of `seed`, with the
 * billing checksum `cch` (e.g. "a5145"; NULL gives "00000"): the built-in
 * stand-in system prompt and tools of `kvreplay import --from claude-code`.
 * *system (3 TEXT blocks) and *tools are malloc'd arrays the caller frees
 * (hx_block_free / hx_tool_free each, then free). Returns ENG_OK or ENG_ERR_NOMEM. */
int  hx_synth_agent_prefix(uint64_t seed, int64_t system_bytes, const char *cch, hx_block **system,
                           int32_t *n_system, hx_tool **tools, int32_t *n_tools);

/* The agent scenario's tool definitions (Bash, Read, Edit, Write, Grep, Glob,
 * TodoWrite, WebFetch, Task), own wording, realistic schemas: a malloc'd
 * array the caller frees. Returns ENG_OK or ENG_ERR_NOMEM. */
int  hx_synth_agent_tools(hx_tool **tools, int32_t *n_tools);

/* Generated instruction prose of at least `bytes` bytes (a pure function of
 * seed and index): with intro, an opening paragraph and `# Heading`
 * sections with bullet lists and examples, as a system prompt; without,
 * plain sentences and bullets, as a tool's usage notes. malloc'd; NULL on OOM. */
char *hx_synth_instruction_text(uint64_t seed, uint64_t index, int64_t bytes, bool intro);

#endif /* HX_SYNTH_TRANSCRIPT_H */
