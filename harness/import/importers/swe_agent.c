/*
 * harness/import/importers/swe_agent.c: `--from swe-agent`: a
 * SWE-agent *.traj JSON file; one model call per assistant message of
 * history[] (OpenAI-style messages, parsed by the OpenAI dialect: api/openai.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "errors.h"
#include "import.h"
#include "importer.h"
#include "status.h"
#include "str.h"
#include "util.h"

static int swe_import(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                      int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        hx_errf_at(err, errlen, path, je.line, NULL, "invalid JSON at column %d: %s", je.column, je.text);
        return ENG_ERR_FORMAT;
    }
    char name[256];
    if (o->session) snprintf(name, sizeof name, "%s", o->session);
    else hx_imp_base_name(path, name, sizeof name);
    json_t *hist = json_object_get(root, "history");
    int rc = ENG_ERR_FORMAT;
    hx_request conv = {0};  /* the conversation so far (system blocks + messages) */
    conv.response.role = HX_ROLE_ASSISTANT;
    if (!json_is_object(root) || !json_is_array(hist)) {
        hx_errf_at(err, errlen, path, 0, "history", !json_is_object(root) ? "the file must be a JSON object" :
                   hist ? "expected an array" : "missing");
        goto out;
    }
    int32_t turn = 0;
    char f[HX_IMP_FIELD_MAX];
    for (size_t i = 0; i < json_array_size(hist); i++) {
        hx_message m;
        bool sys;
        hx_imp_fieldf(f, "history[%zu]", i);
        rc = hx_api_openai_message(json_array_get(hist, i), path, 0, f, &m, &sys, err, errlen);
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            continue;
        }
        if (rc) goto out;
        if (m.role == HX_ROLE_ASSISTANT) { /* one model call: the history before it is the prompt */
            hx_request q;
            if ((rc = hx_request_copy(&q, &conv))) {
                hx_message_free(&m);
                goto out;
            }
            free(q.session);
            q.session = hx_strdup(name);
            q.turn = turn++;
            q.line = 0;
            if (!q.session || (rc = hx_message_copy(&q.response, &m)) || (rc = hx_transcript_push(out, &q))) {
                hx_request_free(&q);
                hx_message_free(&m);
                rc = rc ? rc : ENG_ERR_NOMEM;
                goto out;
            }
        }
        rc = (sys && conv.n_messages == 0) ? hx_api_openai_system_to_blocks(&conv, &m) : hx_request_push_message(&conv, &m);
        if (rc) {
            hx_message_free(&m);
            goto out;
        }
    }
    rc = ENG_OK;
out:
    hx_request_free(&conv);
    json_decref(root);
    return rc;
}

const hx_importer hx_importer_swe_agent = {
    .name = "swe-agent",
    .help = "a SWE-agent trajectory (*.traj JSON with history[])",
    .import = swe_import,
};
