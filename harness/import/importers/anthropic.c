/*
 * harness/import/importers/anthropic.c: `--from anthropic`: JSONL of
 * Messages API request bodies, one model call per line, each parsed by the
 * Anthropic dialect's own prompt parser (api/anthropic.c, strict: a block of
 * an unknown type is an error); sessions by key and responses from the next
 * request (import.c).
 */
#include <jansson.h>

#include "api.h"
#include "import.h"
#include "importer.h"

static int anthropic_request(json_t *j, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    return hx_api_anthropic_prompt(j, path, line, NULL, q, err, errlen);
}

static int anthropic_import(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                            int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    return hx_imp_bodies(o, path, data, n, out, n_skipped, anthropic_request, &hx_api_anthropic_body, err, errlen);
}

const hx_importer hx_importer_anthropic = {
    .name = "anthropic",
    .help = "JSONL of Messages API request bodies (one model call per line)",
    .import = anthropic_import,
};
