/* harness/base/json.c: canonical JSON (see json.h). */
#include "json.h"

#include <jansson.h>

char *hx_json_canonical(const struct json_t *j) {
    return json_dumps((const json_t *)j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
}

char *hx_json_canonical_text(const char *json, size_t len) {
    json_error_t je;
    json_t *j = json_loadb(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!j) return NULL;
    char *s = hx_json_canonical(j);
    json_decref(j);
    return s;
}
