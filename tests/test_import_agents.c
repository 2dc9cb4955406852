/*
 * tests/test_import_agents.c: the Codex rollout and Gemini CLI chat log importers on logs in the shape the
 * real agents write (the structure of logs produced by @openai/codex 0.169.0 and @google/gemini-cli 0.61.0
 * against kvreplay serve; written here, not copied): calls, prompts, responses and usage; lines of types
 * the importer does not know skipped and counted, fields it does not know counted; a bad line named by
 * file, line and field, or skipped with skip_bad. tests/clients/run.sh imports the real agents' own logs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import.h"
#include "status.h"
#include "transcript.h"

static const char k_rollout[] =
    "{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"01a2\",\"cwd\":\"/w\",\"cli_version\":\"0.169.0\","
    "\"base_instructions\":{\"text\":\"You are a coding agent running in the Codex CLI.\"}}}\n"
    "{\"timestamp\":\"t\",\"type\":\"event_msg\",\"payload\":{\"type\":\"task_started\",\"turn_id\":\"u1\"}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"id\":\"m1\",\"role\":\"developer\","
    "\"content\":[{\"type\":\"input_text\",\"text\":\"<skills_instructions>none</skills_instructions>\"}]}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"user\","
    "\"content\":[{\"type\":\"input_text\",\"text\":\"<environment_context>/w</environment_context>\"}]}}\n"
    "{\"timestamp\":\"t\",\"type\":\"world_state\",\"payload\":{\"full\":true,\"state\":{}}}\n"
    "{\"timestamp\":\"t\",\"type\":\"turn_context\",\"payload\":{\"cwd\":\"/w\",\"model\":\"gpt-5-codex\"}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"user\","
    "\"content\":[{\"type\":\"input_text\",\"text\":\"list the files\"}],\"internal_chat_message_metadata_passthrough\":{}}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"reasoning\",\"summary\":[],"
    "\"encrypted_content\":\"gAAA\"}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"assistant\",\"status\":"
    "\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"Listing.\",\"annotations\":[]}]}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"function_call\",\"call_id\":\"call_1\","
    "\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"}}\n"
    "{\"timestamp\":\"t\",\"type\":\"token_usage_record\",\"payload\":{\"usage\":{\"input_tokens\":100}}}\n"
    "{\"timestamp\":\"t\",\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":{\"last_token_usage\":"
    "{\"input_tokens\":6856,\"cached_input_tokens\":6400,\"output_tokens\":20}}}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"function_call_output\",\"call_id\":\"call_1\","
    "\"output\":\"a.txt\\nb.txt\\n\"}}\n"
    "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"assistant\","
    "\"content\":[{\"type\":\"output_text\",\"text\":\"Two files.\"}]}}\n"
    "{\"timestamp\":\"t\",\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":{\"last_token_usage\":"
    "{\"input_tokens\":6900,\"cached_input_tokens\":6848}}}}\n";

static const char k_chat[] =
    "{\"sessionId\":\"c64c\",\"projectHash\":\"3b6c\",\"startTime\":\"t\",\"lastUpdated\":\"t\",\"kind\":\"main\"}\n"
    "{\"$set\":{\"messages\":[{\"id\":\"d049\",\"timestamp\":\"t\",\"type\":\"user\",\"content\":[{\"text\":"
    "\"<session_context>This is the Gemini CLI.</session_context>\"}]}]}}\n"
    "{\"id\":\"de4b\",\"timestamp\":\"t\",\"type\":\"user\",\"content\":[{\"text\":\"read notes.txt\"}]}\n"
    "{\"$set\":{\"lastUpdated\":\"t\"}}\n"
    "{\"id\":\"a7a0\",\"timestamp\":\"t\",\"type\":\"gemini\",\"content\":\"Reading.\",\"thoughts\":[],\"tokens\":{\"input\":"
    "7567,\"output\":58,\"cached\":0},\"model\":\"gemini-2.5-flash\"}\n"
    "{\"id\":\"a7a0\",\"timestamp\":\"t\",\"type\":\"gemini\",\"content\":\"Reading.\",\"thoughts\":[{\"subject\":\"Plan\","
    "\"description\":\"read it\"}],\"tokens\":{\"input\":7567,\"output\":58,\"cached\":0},\"model\":\"gemini-2.5-flash\","
    "\"toolCalls\":[{\"id\":\"read_file__call_1\",\"name\":\"read_file\",\"args\":{\"file_path\":\"/w/notes.txt\"},"
    "\"result\":[],\"status\":\"success\",\"displayName\":\"ReadFile\"}]}\n"
    "{\"id\":\"578e\",\"timestamp\":\"t\",\"type\":\"user\",\"content\":[{\"functionResponse\":{\"id\":\"read_file__call_1\","
    "\"name\":\"read_file\",\"response\":{\"output\":\"hello\\n\"}}}]}\n"
    "{\"id\":\"i1\",\"timestamp\":\"t\",\"type\":\"info\",\"content\":\"Ripgrep is not available.\"}\n"
    "{\"id\":\"0beb\",\"timestamp\":\"t\",\"type\":\"gemini\",\"content\":\"It says hello.\",\"tokens\":{\"input\":7672,"
    "\"cached\":7552},\"model\":\"gemini-2.5-flash\"}\n";

static int import(const char *from, const char *data, bool skip_bad, hx_transcript *t, hx_import_stats *st,
                  int64_t *skipped, char *err, size_t errlen) {
    hx_import_opts o = {0};
    int f = hx_import_format_from_name(from);
    assert_true(f >= 0);
    o.format = (hx_import_format)f;
    o.skip_bad = skip_bad;
    o.stats = st;
    memset(st, 0, sizeof *st);
    *skipped = 0;
    return hx_import_buffer(&o, "log.jsonl", data, strlen(data), t, skipped, err, errlen);
}

static void a_codex_rollout_becomes_its_model_calls(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st;
    int64_t sk;
    char err[512];
    int rc = import("codex", k_rollout, false, &t, &st, &sk, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, ENG_OK);
    assert_int_equal(t.n, 2);
    const hx_request *a = &t.reqs[0], *b = &t.reqs[1];
    assert_string_equal(a->session, "01a2");
    assert_int_equal(a->n_system, 2);  /* base_instructions, then the developer message */
    assert_string_equal(a->system[0].text, "You are a coding agent running in the Codex CLI.");
    assert_int_equal(a->n_messages, 2);
    assert_int_equal(a->response.n_blocks, 2);
    assert_int_equal(a->response.blocks[1].type, HX_BLOCK_TOOL_USE);
    assert_string_equal(a->response.blocks[1].input, "{\"cmd\":\"ls\"}");
    assert_true(a->usage.present);
    assert_int_equal(a->usage.input, 456);
    assert_int_equal(a->usage.cache_read, 6400);
    /* the second call's prompt: the first's, its answer, the tool's output */
    assert_int_equal(b->turn, 1);
    assert_int_equal(b->n_messages, 4);
    assert_int_equal(b->messages[3].role, HX_ROLE_TOOL);
    assert_string_equal(b->messages[3].blocks[0].text, "a.txt\nb.txt\n");
    assert_string_equal(b->response.blocks[0].text, "Two files.");
    /* what it did not know: two line types skipped, fields counted, the encrypted reasoning dropped */
    assert_int_equal(st.skipped_line_types, 2);
    assert_string_equal(st.skipped_types, "world_state,token_usage_record");
    assert_true(st.unknown_fields >= 3);
    assert_non_null(strstr(st.unknown_field_paths, "payload.internal_chat_message_metadata_passthrough"));
    assert_int_equal(st.empty_thinking, 1);
    hx_transcript_free(&t);
}

static void a_gemini_cli_log_becomes_its_model_calls(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st;
    int64_t sk;
    char err[512];
    int rc = import("gemini-cli", k_chat, false, &t, &st, &sk, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, ENG_OK);
    assert_int_equal(t.n, 2);
    const hx_request *a = &t.reqs[0], *b = &t.reqs[1];
    assert_string_equal(a->session, "c64c");
    assert_int_equal(a->n_messages, 2);  /* the $set opening context, then the prompt */
    /* the model record written again with its tool calls replaced the first copy */
    assert_int_equal(a->response.n_blocks, 3);
    assert_int_equal(a->response.blocks[0].type, HX_BLOCK_THINKING);
    assert_string_equal(a->response.blocks[0].text, "Plan\nread it");
    assert_int_equal(a->response.blocks[2].type, HX_BLOCK_TOOL_USE);
    assert_string_equal(a->response.blocks[2].id, "read_file__call_1");
    assert_int_equal(b->n_messages, 4);
    assert_int_equal(b->messages[3].blocks[0].type, HX_BLOCK_TOOL_RESULT);
    assert_string_equal(b->messages[3].blocks[0].text, "{\"output\":\"hello\\n\"}");
    assert_int_equal(b->usage.cache_read, 7552);
    assert_int_equal(b->usage.input, 120);
    assert_int_equal(st.skipped_line_types, 1);
    assert_string_equal(st.skipped_types, "info");
    assert_non_null(strstr(st.unknown_field_paths, "toolCalls[].displayName"));
    hx_transcript_free(&t);
}

static void bad_lines_name_file_line_and_field_or_are_skipped(void **state) {
    (void)state;
    static const struct { const char *from, *data, *msg; } bad[] = {
        {"codex", "{\"type\":\"response_item\",\"payload\":7}\n", "log.jsonl:1: payload: expected an object"},
        {"codex", "{\"type\":\"session_meta\",\"payload\":{}}\n{\"payload\":{}}\n", "log.jsonl:2: type: missing"},
        {"codex", "{\"type\":\"response_item\",\"payload\":{\"type\":\"function_call\",\"name\":\"x\"}}\n",
         "log.jsonl:1: payload.call_id: missing"},
        {"codex", "{\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":"
                  "\"input_text\",\"text\":5}]}}\n", "log.jsonl:1: payload.content[0].text: expected a string"},
        {"gemini-cli", "{\"sessionId\":\"s\"}\n{\"id\":\"u\",\"type\":\"user\",\"content\":5}\n",
         "log.jsonl:2: content: expected a string or an array of parts"},
        {"gemini-cli", "{\"sessionId\":\"s\"}\n{\"id\":\"u\",\"type\":\"user\",\"content\":[{\"text\":\"hi\"}]}\n"
                       "{\"id\":\"g\",\"type\":\"gemini\",\"content\":\"a\",\"toolCalls\":[{\"args\":{}}]}\n",
         "log.jsonl:3: gemini.parts[1].functionCall.name: missing"},
        {"gemini-cli", "{\"sessionId\":\"s\"}\nnot json\n", "log.jsonl:2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hx_transcript t;
        hx_import_stats st;
        int64_t sk;
        char err[512] = "";
        assert_int_equal(import(bad[i].from, bad[i].data, false, &t, &st, &sk, err, sizeof err), ENG_ERR_FORMAT);
        if (strncmp(err, bad[i].msg, strlen(bad[i].msg))) fprintf(stderr, "%zu: %s\n", i, err);
        assert_int_equal(strncmp(err, bad[i].msg, strlen(bad[i].msg)), 0);
        /* --skip-bad: skipped and counted, the rest imported */
        assert_int_equal(import(bad[i].from, bad[i].data, true, &t, &st, &sk, err, sizeof err), ENG_OK);
        assert_int_equal(sk, 1);
        hx_transcript_free(&t);
    }
}

/* A log of only line types the importer does not know is no error, and says what it skipped. */
static void unknown_line_types_are_never_fatal(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st;
    int64_t sk;
    char err[512];
    const char *future = "{\"type\":\"hologram\",\"payload\":{}}\n{\"type\":\"hologram\",\"payload\":7}\n"
                         "{\"type\":\"teleport\"}\n";
    assert_int_equal(import("codex", future, false, &t, &st, &sk, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, 0);
    assert_int_equal(st.skipped_line_types, 3);
    assert_string_equal(st.skipped_types, "hologram,teleport");
    hx_transcript_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_codex_rollout_becomes_its_model_calls),
        cmocka_unit_test(a_gemini_cli_log_becomes_its_model_calls),
        cmocka_unit_test(bad_lines_name_file_line_and_field_or_are_skipped),
        cmocka_unit_test(unknown_line_types_are_never_fatal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
