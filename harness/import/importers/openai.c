/*
 * harness/import/importers/openai.c: `--from openai`: JSONL of
 * chat-completions request bodies, one model call per line, each parsed by
 * the OpenAI dialect's own prompt parser (api/openai.c); sessions by key and
 * responses from the next request (import.c).
 */
#include <jansson.h>

#include "api.h"
#include "import.h"
#include "importer.h"

static int openai_request(json_t *j, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    return hx_api_openai_prompt(j, path, line, q, err, errlen);
}

static int openai_import(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                         int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    return hx_imp_bodies(o, path, data, n, out, n_skipped, openai_request, &hx_api_openai_chat_body, err, errlen);
}

const hx_importer hx_importer_openai = {
    .name = "openai",
    .help = "JSONL of chat-completions request bodies (one model call per line)",
    .import = openai_import,
};
