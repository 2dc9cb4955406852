/*
 * tests/fuzz/seeds.c: writes the seed corpora of tests/fuzz/corpus/
 * (`make fuzz-seeds`; deterministic, so a rerun rewrites the same files).
 *
 * Every seed is small and made here: micro models written by the project's
 * own synth and GGUF writer; vocabulary GGUFs cut from the real ones in
 * ../shared/data (the first tokens and the merges among them, written with
 * eng_gguf_writer: a cut made here, never a copy; skipped when the shared
 * files are absent); tokenizer texts; transcripts from the seeded generator;
 * a few lines of the project's own importer fixtures (tests/data) and a cut
 * of the SWE-agent trajectory; checkpoint files and state blobs of the
 * fuzz targets' own fixture models (tests/fuzz/targets.c), so they pass
 * every check and mutations start from deep inside the parsers.
 *
 * usage: fuzz-seeds CORPUS_DIR
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "api.h"
#include "diskcache.h"
#include "gguf.h"
#include "import.h"
#include "importer.h"
#include "model.h"
#include "status.h"
#include "synth.h"
#include "synth_transcript.h"
#include "targets.h"
#include "transcript.h"
#include "util.h"

static const char *g_root;
static int g_written;

static void die(const char *what, const char *err) {
    fprintf(stderr, "fuzz-seeds: %s: %s\n", what, err ? err : strerror(errno));
    exit(1);
}

static void put(const char *target, const char *name, const void *data, size_t n) {
    char dir[512], path[768], err[256];
    snprintf(dir, sizeof dir, "%s/%s", g_root, target);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) die(dir, NULL);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (eng_write_atomic(path, data, n, err, sizeof err) != ENG_OK) die(path, err);
    g_written++;
}

static const char *shared(const char *rel, char *buf, size_t cap) {
    const char *d = getenv("KVR_SHARED_DATA");
    snprintf(buf, cap, "%s/%s", d && *d ? d : "../shared/data", rel);
    return buf;
}

// ----------------------------------------------------------------------------
// GGUF: micro models and vocabulary cuts

static void micro_models(void) {
    static const uint32_t type[] = {ENG_GGML_TYPE_F32, ENG_GGML_TYPE_F16, ENG_GGML_TYPE_Q8_0, ENG_GGML_TYPE_BF16};
    for (int a = 0; eng_synth_arch_name(a); a++) {
        const char *arch = eng_synth_arch_name(a);
        eng_synth_params p = eng_synth_preset_arch(arch, "tiny");
        eng_synth_params tiny = p;
        p.seed = 1;
        p.type = type[a % 4];
        p.n_embd = p.type == ENG_GGML_TYPE_Q8_0 ? 32 : 16;  /* q8_0 rows are blocks of 32 */
        p.n_layer = 2;
        p.n_head = 2;
        p.n_head_kv = 1;
        p.n_ff = 32;
        p.n_ctx = 128;
        p.n_rot = 0;
        p.n_swa = 8;
        p.attn_every = 2;
        p.ssm_d_state = 8;
        p.ssm_head_dim = 8;
        p.ssm_n_group = 1;
        p.ssm_d_conv = 4;
        p.wkv_head_size = 8;
        p.lora_decay = p.lora_iclr = p.lora_mix = p.lora_gate = 4;
        void *buf = NULL;
        size_t n = 0;
        char err[256], name[64];
        if (eng_synth_to_buffer(&p, &buf, &n, err, sizeof err) != ENG_OK) {
            /* an architecture whose shape rules these micro dims break: its tiny preset, the seed given */
            fprintf(stderr, "fuzz-seeds: %s at micro size: %s; using its tiny preset\n", arch, err);
            p = tiny;
            p.seed = 1;
            if (eng_synth_to_buffer(&p, &buf, &n, err, sizeof err) != ENG_OK) die(arch, err);
        }
        snprintf(name, sizeof name, "micro-%s-%s.gguf", arch, eng_ggml_type_name(p.type));
        put("model", name, buf, n);
        if (a == 0) put("gguf", name, buf, n);
        free(buf);
    }
}

/* The first n_keep tokens of a real vocabulary (with their scores and types,
 * and for BPE the merges whose parts and result are among them), its special
 * ids when they are kept, written with the project's writer as version v. */
static void vocab_cut(const char *rel, int32_t n_keep, uint32_t v, const char *target, const char *name) {
    char path[512], err[512];
    eng_gguf *g = NULL;
    if (eng_gguf_open(shared(rel, path, sizeof path), &g, err, sizeof err) != ENG_OK) {
        fprintf(stderr, "fuzz-seeds: %s absent or unreadable: no %s seed\n", path, name);
        return;
    }
    int64_t ti = eng_gguf_find_key(g, "tokenizer.ggml.tokens");
    int32_t n = (int32_t)eng_gguf_arr_n(g, ti);
    if (n_keep > n) n_keep = n;
    const char **toks = calloc((size_t)n_keep, sizeof *toks);
    size_t *lens = calloc((size_t)n_keep, sizeof *lens);
    float *scores = calloc((size_t)n_keep, sizeof *scores);
    int32_t *types = calloc((size_t)n_keep, sizeof *types);
    if (!toks || !lens || !scores || !types) die("vocab cut", "out of memory");
    int64_t si = eng_gguf_find_key(g, "tokenizer.ggml.scores"), yi = eng_gguf_find_key(g, "tokenizer.ggml.token_type");
    for (int32_t i = 0; i < n_keep; i++) {
        eng_gguf_get_arr_str(g, ti, (uint64_t)i, &toks[i], &lens[i]);
        scores[i] = si >= 0 ? (float)eng_gguf_get_arr_num(g, si, (uint64_t)i) : 0.0f;
        types[i] = yi >= 0 ? (int32_t)eng_gguf_get_arr_num(g, yi, (uint64_t)i) : 1;
    }
    eng_gguf_writer *w = eng_gguf_writer_new(v, 0);
    const char *model = NULL, *pre = NULL;
    size_t ml = 0, pl = 0;
    eng_gguf_get_str(g, "tokenizer.ggml.model", &model, &ml);
    char mbuf[64] = "", pbuf[64] = "";
    snprintf(mbuf, sizeof mbuf, "%.*s", (int)ml, model ? model : "");
    if (eng_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pl) == ENG_OK) snprintf(pbuf, sizeof pbuf, "%.*s", (int)pl, pre);
    eng_gguf_writer_set_str(w, "general.architecture", "llama");
    eng_gguf_writer_set_str(w, "tokenizer.ggml.model", mbuf);
    if (pbuf[0]) eng_gguf_writer_set_str(w, "tokenizer.ggml.pre", pbuf);
    eng_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)n_keep, toks, lens);
    eng_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ENG_GGUF_TYPE_FLOAT32, (uint64_t)n_keep, scores);
    eng_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ENG_GGUF_TYPE_INT32, (uint64_t)n_keep, types);
    static const char *const ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                      "tokenizer.ggml.unknown_token_id", NULL};
    for (int k = 0; ids[k]; k++) {
        int64_t id;
        if (eng_gguf_get_int(g, ids[k], &id) == ENG_OK && id >= 0 && id < n_keep)
            eng_gguf_writer_set_u32(w, ids[k], (uint32_t)id);
    }
    int64_t mi = eng_gguf_find_key(g, "tokenizer.ggml.merges");
    if (mi >= 0) {  /* merges "a b" whose a, b and ab are kept tokens */
        uint64_t nm = eng_gguf_arr_n(g, mi);
        const char **keep = calloc(nm ? nm : 1, sizeof *keep);
        size_t *klen = calloc(nm ? nm : 1, sizeof *klen);
        uint64_t nk = 0;
        for (uint64_t j = 0; j < nm && nk < 400; j++) {
            const char *s;
            size_t len;
            eng_gguf_get_arr_str(g, mi, j, &s, &len);
            const char *sp = memchr(s, ' ', len);
            if (!sp) continue;
            size_t la = (size_t)(sp - s), lb = len - la - 1;
            bool ha = false, hb = false, hab = false;
            for (int32_t i = 0; i < n_keep; i++) {
                ha |= lens[i] == la && !memcmp(toks[i], s, la);
                hb |= lens[i] == lb && !memcmp(toks[i], sp + 1, lb);
                hab |= lens[i] == la + lb && !memcmp(toks[i], s, la) && !memcmp(toks[i] + la, sp + 1, lb);
            }
            if (ha && hb && hab) {
                keep[nk] = s;
                klen[nk++] = len;
            }
        }
        eng_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", nk, keep, klen);
        free(keep);
        free(klen);
    }
    void *buf = NULL;
    size_t len = 0;
    if (eng_gguf_writer_to_buffer(w, &buf, &len) != ENG_OK) die(name, "writer");
    put(target, name, buf, len);
    free(buf);
    eng_gguf_writer_free(w);
    free(toks);
    free(lens);
    free(scores);
    free(types);
    eng_gguf_close(g);
}

// ----------------------------------------------------------------------------
// Tokenizer texts: byte 0 = flags (bit 0 BOS, bit 1 EOS, bit 2 special), vocabulary in bits 4..7

static void texts(const char *target) {
    static const char *const t[] = {
        "Hello world",
        "  leading spaces, trailing\t\n",
        "{\"name\": \"Read\", \"input_schema\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}}}",
        "def f(x):\n    return x ** 2  # square\n\nprint(f(12345))\n",
        "diff --git a/x.c b/x.c\n@@ -1,3 +1,4 @@\n-int a;\n+int a = 0;\n",
        "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;",
        "<s> <|im_start|>user\nhi<|im_end|> </s>",
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 \xe2\x96\x81\xe2\x96\x81",
        "bad utf-8: \xff\xfe\xc3\x28 \xe2\x82 end",
        "1234567890 3.14159 0x7fff",
    };
    for (int i = 0; i < (int)(sizeof t / sizeof t[0]); i++) {
        uint8_t buf[512];
        buf[0] = (uint8_t)((i % 3 == 0 ? 0 : i % 3 == 1 ? 5 : 4) | ((i & 1) << 4));
        size_t n = strlen(t[i]);
        memcpy(buf + 1, t[i], n);
        char name[32];
        snprintf(name, sizeof name, "text-%02d", i);
        put(target, name, buf, n + 1);
    }
}

// ----------------------------------------------------------------------------
// Transcripts and importer inputs

static void transcripts(void) {
    static const hx_synth_scenario sc[] = {HX_SYNTH_AGENT, HX_SYNTH_EXTEND, HX_SYNTH_STATIC};
    for (int i = 0; i < 3; i++) {
        hx_synth_params p;
        hx_synth_params_init(&p, sc[i]);
        p.seed = (uint64_t)i + 1;
        p.sessions = 1;
        p.turns = 2;
        p.system_bytes = 600;
        p.tool_result_bytes = 200;
        p.base_bytes = 300;
        p.step_bytes = 100;
        hx_transcript t;
        char err[256], name[32];
        if (hx_synth_transcript(&p, &t, err, sizeof err) != ENG_OK) die("synth transcript", err);
        char *text = NULL;
        size_t n = 0;
        if (hx_transcript_serialize(&t, &text, &n, err, sizeof err) != ENG_OK) die("serialize", err);
        snprintf(name, sizeof name, "synth-%d.jsonl", i);
        put("transcript", name, text, n);
        free(text);
        hx_transcript_free(&t);
    }
    char *data = NULL;
    size_t n = 0;
    char err[256];
    if (eng_read_file("tests/data/transcript_sample.jsonl", &data, &n, err, sizeof err) == ENG_OK) {
        put("transcript", "sample.jsonl", data, n);
        free(data);
    }
}

/* The first max_lines lines of a file of the project's own fixtures. */
static void head_lines(const char *path, int max_lines, const char *target, const char *name) {
    char *data = NULL;
    size_t n = 0;
    char err[256];
    if (eng_read_file(path, &data, &n, err, sizeof err) != ENG_OK) die(path, err);
    size_t end = 0;
    for (int l = 0; l < max_lines && end < n; l++) {
        const char *nl = memchr(data + end, '\n', n - end);
        end = nl ? (size_t)(nl - data) + 1 : n;
    }
    put(target, name, data, end);
    free(data);
}

static void importer_inputs(void) {
    head_lines("tests/data/anthropic_sample.jsonl", 3, "import-anthropic", "sample-3.jsonl");
    head_lines("tests/data/openai_sample.jsonl", 3, "import-openai", "sample-3.jsonl");
    head_lines("tests/data/claude_code_sample.jsonl", 12, "import-claude-code", "sample-12.jsonl");
    static const char repro[] =
        "{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"\",\"content\":[{\"type\":\"text\",\"text\":\"\"},{}]}]}\n";
    put("import-openai", "issue14-leak.jsonl", repro, sizeof repro - 1);
    /* SWE-agent: the first history entries of the real trajectory, re-serialized here */
    char path[512];
    json_error_t je;
    json_t *traj = json_load_file(shared("transcripts/sweagent_function_calling_simple.traj", path, sizeof path), 0, &je);
    if (traj) {
        json_t *hist = json_object_get(traj, "history"), *cut = json_array();
        for (size_t i = 0; i < json_array_size(hist) && i < 5; i++) {
            json_t *m = json_deep_copy(json_array_get(hist, i));
            json_t *c = json_object_get(m, "content");
            if (json_is_string(c) && json_string_length(c) > 400)
                json_object_set_new(m, "content", json_stringn(json_string_value(c), 400));
            json_array_append_new(cut, m);
        }
        json_t *o = json_object();
        json_object_set_new(o, "history", cut);
        char *s = json_dumps(o, JSON_COMPACT);
        put("import-swe-agent", "cut-5.traj", s, strlen(s));
        free(s);
        json_decref(o);
        json_decref(traj);
    } else {
        fprintf(stderr, "fuzz-seeds: %s absent: only the made-up SWE-agent seed\n", path);
    }
    static const char traj_min[] =
        "{\"history\":[{\"role\":\"system\",\"content\":\"You are a helpful agent.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Fix the bug.\"}]},"
        "{\"role\":\"assistant\",\"content\":\"Looking.\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"command\\\":\\\"ls\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_ids\":[\"c1\"],\"content\":\"a.py\\n\"},"
        "{\"role\":\"assistant\",\"content\":\"Done.\"}]}";
    put("import-swe-agent", "minimal.traj", traj_min, sizeof traj_min - 1);
    /* a Codex rollout and a Gemini CLI chat log, in the shapes the agents write */
    static const char rollout[] =
        "{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"s1\",\"base_instructions\":{\"text\":\"You are Codex.\"}}}\n"
        "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"user\",\"content\":"
        "[{\"type\":\"input_text\",\"text\":\"ls\"}]}}\n"
        "{\"timestamp\":\"t\",\"type\":\"turn_context\",\"payload\":{\"cwd\":\"/w\"}}\n"
        "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"function_call\",\"call_id\":\"c1\","
        "\"name\":\"exec_command\",\"arguments\":\"{}\"}}\n"
        "{\"timestamp\":\"t\",\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":{\"last_token_usage\":"
        "{\"input_tokens\":10,\"cached_input_tokens\":4}}}}\n"
        "{\"timestamp\":\"t\",\"type\":\"world_state\",\"payload\":{}}\n"
        "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"function_call_output\",\"call_id\":\"c1\","
        "\"output\":\"a\"}}\n"
        "{\"timestamp\":\"t\",\"type\":\"compacted\",\"payload\":{\"message\":\"\",\"replacement_history\":[]}}\n"
        "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"assistant\","
        "\"content\":[{\"type\":\"output_text\",\"text\":\"done\"}]}}\n";
    put("import-codex", "rollout.jsonl", rollout, sizeof rollout - 1);
    static const char chat[] =
        "{\"sessionId\":\"s\",\"projectHash\":\"p\",\"startTime\":\"t\",\"kind\":\"main\"}\n"
        "{\"$set\":{\"messages\":[{\"id\":\"u0\",\"type\":\"user\",\"content\":[{\"text\":\"<session_context>\"}]}]}}\n"
        "{\"id\":\"u1\",\"type\":\"user\",\"content\":[{\"text\":\"read a\"}]}\n"
        "{\"id\":\"g1\",\"type\":\"gemini\",\"content\":\"\",\"thoughts\":[{\"subject\":\"s\",\"description\":\"d\"}],"
        "\"toolCalls\":[{\"id\":\"c1\",\"name\":\"read_file\",\"args\":{\"file_path\":\"a\"}}],"
        "\"tokens\":{\"input\":9,\"cached\":0}}\n"
        "{\"id\":\"u2\",\"type\":\"user\",\"content\":[{\"functionResponse\":{\"id\":\"c1\",\"name\":\"read_file\","
        "\"response\":{\"output\":\"x\"}}}]}\n"
        "{\"id\":\"i1\",\"type\":\"info\",\"content\":\"note\"}\n"
        "{\"id\":\"g2\",\"type\":\"gemini\",\"content\":\"It says x.\"}\n";
    put("import-gemini-cli", "chat.jsonl", chat, sizeof chat - 1);
    /* every other registered importer: at least an empty seed (the fuzzer starts from it) */
    for (int f = 0; hx_importers[f]; f++) {
        char dir[512], target[64];
        snprintf(target, sizeof target, "import-%s", hx_importers[f]->name);
        snprintf(dir, sizeof dir, "%s/%s", g_root, target);
        struct stat sb;
        if (stat(dir, &sb) != 0) put(target, "empty", "{}\n", 3);
    }
}

// ----------------------------------------------------------------------------
// The API dialects: request bodies of every route, and a generation's
// response and SSE stream as the layer itself writes them

static void put_str(const char *target, const char *name, const char *s) { put(target, name, s, strlen(s)); }

static void put_json(const char *target, const char *name, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) die(name, "json");
    put_str(target, name, s);
    free(s);
}

/* The response body and the stream of a small generation through route rt (request body req). */
static void api_outputs(const char *target, const char *path, const char *req) {
    const hx_api_route *rt = hx_api_route_find("POST", path, NULL);
    hx_api_req q;
    hx_api_error e;
    if (!rt || rt->parse(rt, path, NULL, req, strlen(req), &q, &e) != ENG_OK) die(path, "seed request");
    hx_api_result r;
    hx_api_result_init(&r);
    r.id = strdup("seed-1");
    r.usage.prompt_tokens = 12;
    r.usage.cached_tokens = 8;
    r.usage.completion_tokens = 2;
    r.timings = (hx_api_timings){.cache_n = 8, .prompt_n = 4, .predicted_n = 2, .prompt_ms = 1.5, .predicted_ms = 0.5};
    r.finish = HX_API_FINISH_STOP;
    hx_api_prob top[2] = {{7, " Once", 5, -0.25f}, {9, " A", 2, -1.5f}};
    hx_api_token toks[2] = {{7, " Once", 5, -0.25f, top, 2}, {8, " \xE2\x96", 3, -2.0f, top, 1}};
    hx_block b;
    if (hx_block_init(&b, HX_BLOCK_TEXT, " Once \xEF\xBF\xBD", NULL, NULL, NULL, false) ||
        hx_message_push_block(&r.content, &b))
        die(path, "block");
    for (int i = 0; i < 2; i++) hx_api_result_push_token(&r, &toks[i]);
    char name[64];
    snprintf(name, sizeof name, "response-%s.json", path[1] == 'v' ? path + 4 : path + 1);
    for (char *c = name; *c; c++) if (*c == '/') *c = '-';
    put_json(target, name, rt->respond(&q, &r));
    hx_api_stream st;
    hx_api_stream_init(&st, &q, &r);
    for (int i = 0; i < 2; i++) hx_api_stream_token(&st, &toks[i]);
    if (hx_block_init(&b, HX_BLOCK_TOOL_USE, "", "call_1", "Read", "{\"file_path\":\"a\"}", false)) die(path, "block");
    hx_api_stream_block(&st, &b);
    hx_block_free(&b);
    hx_api_stream_end(&st);
    snprintf(name + strlen(name) - 5, 8, ".sse");
    put(target, name, st.out.data, st.out.len);
    hx_api_stream_free(&st);
    hx_api_error err;
    hx_api_errf(&err, HX_API_ERR_CONTEXT, NULL, "request (5000 tokens) exceeds the available context size (4096 tokens)");
    err.n_prompt_tokens = 5000;
    err.n_ctx = 4096;
    put_json(target, "error-context.json", hx_api_error_body(rt->dialect, &err));
    hx_api_result_free(&r);
    hx_api_req_free(&q);
}

static void api_inputs(void) {
    put_str("api-llama", "completion.json", "{\"prompt\":\"Once upon a time\",\"n_predict\":8,\"n_probs\":3,"
                                            "\"cache_prompt\":false,\"id_slot\":0,\"stream\":true,\"stop\":[\"\\n\"]}");
    put_str("api-llama", "completion-ids.json", "{\"prompt\":[1,403,407,261],\"n_predict\":0,\"temperature\":0}");
    put_str("api-llama", "tokenize.json", "{\"content\":\"Hello <|im_start|>\",\"with_pieces\":true}");
    put_str("api-llama", "detokenize.json", "{\"tokens\":[1,403,407]}");
    put_str("api-llama", "tokens.json", "{\"tokens\":[{\"id\":1,\"piece\":\"<s>\"},{\"id\":2,\"piece\":[226,150]}]}");
    api_outputs("api-llama", "/completion", "{\"prompt\":\"x\",\"n_probs\":2,\"return_tokens\":true,\"stream\":true}");
    head_lines("tests/data/openai_sample.jsonl", 3, "api-openai", "sample-3.jsonl");
    put_str("api-openai", "chat.json", "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":"
                                      "\"text\",\"text\":\"be brief\"}]},{\"role\":\"user\",\"content\":\"hi\"}],"
                                      "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logprobs\":true,"
                                      "\"top_logprobs\":2,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                      "\"parameters\":{}}}]}");
    put_str("api-openai", "completions.json", "{\"model\":\"m\",\"prompt\":[1,2,3],\"logprobs\":2,\"max_tokens\":4}");
    api_outputs("api-openai", "/v1/chat/completions", "{\"messages\":[],\"stream\":true,\"stream_options\":"
                                                      "{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":2}");
    api_outputs("api-openai", "/v1/completions", "{\"prompt\":\"x\",\"logprobs\":2,\"stream\":true}");
    head_lines("tests/data/anthropic_sample.jsonl", 2, "api-anthropic", "sample-2.jsonl");
    put_str("api-anthropic", "messages.json", "{\"model\":\"claude\",\"max_tokens\":1,\"system\":[{\"type\":\"text\","
                                             "\"text\":\"x-anthropic-billing-header: cc_version=2.1.101.e51; cch=a5145;\"}],"
                                             "\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
                                             "\"content\":[{\"type\":\"text\",\"text\":\"quota\"}]}],\"stream\":true}");
    api_outputs("api-anthropic", "/v1/messages", "{\"max_tokens\":4,\"messages\":[],\"stream\":true}");
    /* the Responses API as Codex sends it, and the Gemini API as the Gemini CLI does */
    put_str("api-responses", "codex.json",
            "{\"model\":\"gpt-5-codex\",\"stream\":true,\"store\":false,\"prompt_cache_key\":\"01a2\",\"input\":["
            "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"You are Codex.\"}]},"
            "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"ls\"}]},"
            "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"plan\"}],\"encrypted_content\":\"x\"},"
            "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"},"
            "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"a\\nb\"},"
            "{\"type\":\"custom_tool_call\",\"call_id\":\"c2\",\"name\":\"apply_patch\",\"input\":\"*** Begin Patch\"},"
            "{\"type\":\"custom_tool_call_output\",\"call_id\":\"c2\",\"output\":\"ok\"}],"
            "\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\",\"parameters\":{\"type\":\"object\"},"
            "\"strict\":false},{\"type\":\"custom\",\"name\":\"apply_patch\",\"format\":{\"type\":\"grammar\"}},"
            "{\"type\":\"web_search\"}],\"tool_choice\":\"auto\",\"reasoning\":{\"effort\":\"low\"},"
            "\"include\":[\"reasoning.encrypted_content\"]}");
    put_str("api-responses", "sdk.json", "{\"model\":\"m\",\"instructions\":\"be brief\",\"input\":\"hi\","
                                        "\"max_output_tokens\":16,\"top_logprobs\":2,"
                                        "\"include\":[\"message.output_text.logprobs\"]}");
    api_outputs("api-responses", "/v1/responses", "{\"input\":\"x\",\"stream\":true,\"top_logprobs\":2,"
                                                  "\"include\":[\"message.output_text.logprobs\"]}");
    put_str("api-gemini", "cli.json",
            "{\"systemInstruction\":{\"parts\":[{\"text\":\"You are Gemini CLI.\"}]},\"contents\":["
            "{\"role\":\"user\",\"parts\":[{\"text\":\"<session_context>\"},{\"text\":\"read a\"}]},"
            "{\"role\":\"model\",\"parts\":[{\"text\":\"plan\",\"thought\":true},{\"functionCall\":{\"id\":\"c1\","
            "\"name\":\"read_file\",\"args\":{\"file_path\":\"a\"}}}]},"
            "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"id\":\"c1\",\"name\":\"read_file\","
            "\"response\":{\"output\":\"x\"}}}]}],\"tools\":[{\"functionDeclarations\":[{\"name\":\"read_file\","
            "\"parametersJsonSchema\":{\"type\":\"object\"}}]}],\"generationConfig\":{\"temperature\":0,"
            "\"maxOutputTokens\":8,\"responseLogprobs\":true,\"logprobs\":2,\"thinkingConfig\":{\"includeThoughts\":true}}}");
    put_str("api-gemini", "count.json", "{\"generateContentRequest\":{\"model\":\"models/m\",\"contents\":"
                                       "[{\"parts\":[{\"text\":\"hi\"}]}]}}");
    api_outputs("api-gemini", "/v1beta/models/m:generateContent",
                "{\"contents\":[],\"generationConfig\":{\"responseLogprobs\":true,\"logprobs\":2}}");
}

// ----------------------------------------------------------------------------
// Checkpoint files and state blobs of the targets' fixture models

static size_t serialize_after(const eng_model *m, const int32_t *toks, int32_t n, uint8_t **out) {
    eng_seq *s = eng_seq_new(m, 1024);
    eng_prefill_params pp = eng_prefill_params_default();
    if (!s || eng_prefill(s, toks, n, &pp, NULL) != ENG_OK) die("fixture prefill", "failed");
    size_t cap = eng_seq_serialized_size(s), w = 0;
    *out = malloc(cap + 1);
    if (!*out || eng_seq_serialize(s, *out + 1, cap, &w) != ENG_OK) die("fixture serialize", "failed");
    eng_seq_free(s);
    return w;
}

static void states_and_checkpoints(void) {
    kvr_fuzz_init();
    int nt = 0;
    const int32_t *toks = kvr_fuzz_fixture_tokens(&nt);
    static const int32_t lens[] = {9, 64};
    for (int a = 0; kvr_fuzz_fixture_model(a); a++)
        for (int k = 0; k < 2; k++) {
            if (a != 0 && k == 1) continue;  /* one longer blob is enough */
            uint8_t *b = NULL;
            size_t n = serialize_after(kvr_fuzz_fixture_model(a), toks, lens[k], &b);
            b[0] = (uint8_t)a;
            char name[32];
            snprintf(name, sizeof name, "arch%d-%d", a, lens[k]);
            put("state", name, b, n + 1);
            b[0] = (uint8_t)(a | 0x80);
            snprintf(name, sizeof name, "arch%d-%d-reseal", a, lens[k]);
            put("state", name, b, n + 1);
            free(b);
        }
    /* checkpoint files: what hx_diskcache_store writes for the llama fixture at 64 tokens */
    char dir[] = "/tmp/kvr_seeds_XXXXXX", err[256];
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    uint8_t *b = NULL;
    size_t n = serialize_after(kvr_fuzz_fixture_model(0), toks, 64, &b);
    hx_diskcache *dc = NULL;
    if (hx_diskcache_open(dir, 1 << 30, &dc, err, sizeof err) != ENG_OK) die(dir, err);
    uint64_t fp = eng_model_fingerprint(kvr_fuzz_fixture_model(0));
    if (hx_diskcache_store(dc, fp, toks, 64, b + 1, n, NULL, err, sizeof err) != HX_DISKCACHE_STORED) die("store", err);
    hx_diskcache_close(dc);
    char name[40], path[128];
    hx_diskcache_key(fp, toks, 64, NULL, NULL, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *file = NULL;
    size_t fn = 0;
    if (eng_read_file(path, &file, &fn, err, sizeof err) != ENG_OK) die(path, err);
    unlink(path);
    rmdir(dir);
    uint8_t *seed = malloc(fn + 1);
    memcpy(seed + 1, file, fn);
    seed[0] = 0x00;
    put("checkpoint", "llama-64", seed, fn + 1);
    seed[0] = 0x80;
    put("checkpoint", "llama-64-reseal", seed, fn + 1);
    put("checkpoint", "header-only-reseal", seed, HX_DISKCACHE_HEADER_SIZE + 1);
    free(seed);
    free(file);
    free(b);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz-seeds CORPUS_DIR\n");
        return 2;
    }
    g_root = argv[1];
    if (mkdir(g_root, 0755) != 0 && errno != EEXIST) die(g_root, NULL);
    micro_models();
    vocab_cut("vocab/ggml-vocab-llama-spm.gguf", 400, 3, "gguf", "llama-spm-cut-400.gguf");
    vocab_cut("vocab/ggml-vocab-gpt-2.gguf", 600, 3, "gguf", "gpt-2-cut-600.gguf");
    vocab_cut("vocab/ggml-vocab-phi-3.gguf", 300, 2, "gguf", "phi-3-cut-300-v2.gguf");
    texts("tokenize-spm");
    texts("tokenize-bpe");
    transcripts();
    importer_inputs();
    api_inputs();
    states_and_checkpoints();
    printf("fuzz-seeds: %d files under %s\n", g_written, g_root);
    return 0;
}
