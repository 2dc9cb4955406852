/*
 * harness/import/importers/anthropic.c: `--from anthropic`: JSONL of
 * Messages API request bodies, one model call per line; sessions by key and
 * responses from the next request (import.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "importer.h"
#include "status.h"
#include "util.h"

static int anthropic_request(json_t *j, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    char f[HX_IMP_FIELD_MAX];
    int rc;
    json_t *msgs = json_object_get(j, "messages");
    if (!json_is_array(msgs)) {
        hx_errf_at(err, errlen, path, line, "messages", msgs ? "expected an array" : "missing");
        return ENG_ERR_FORMAT;
    }
    if ((rc = hx_system_from_json(json_object_get(j, "system"), path, line, "system", &q->system, &q->n_system, err, errlen)) ||
        (rc = hx_tools_from_json(json_object_get(j, "tools"), path, line, "tools", &q->tools, &q->n_tools, err, errlen)))
        goto fail;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        hx_message m;
        hx_imp_fieldf(f, "messages[%zu]", i);
        if ((rc = hx_message_from_json(json_array_get(msgs, i), path, line, f, &m, err, errlen))) goto fail;
        if ((rc = hx_imp_push_msg(q, &m))) {
            hx_message_free(&m);
            goto fail;
        }
    }
    return ENG_OK;
fail:
    hx_request_free(q);
    return rc;
}

static int anthropic_import(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                            int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    return hx_imp_bodies(o, path, data, n, out, n_skipped, anthropic_request, err, errlen);
}

const hx_importer hx_importer_anthropic = {
    .name = "anthropic",
    .help = "JSONL of Messages API request bodies (one model call per line)",
    .import = anthropic_import,
};
