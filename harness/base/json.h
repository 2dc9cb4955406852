/*
 * harness/base/json.h: canonical JSON (compact, keys sorted, UTF-8 kept):
 * the one form in which the harness stores and compares JSON values (tool
 * inputs and schemas, notes, a served request's headers), so that equal
 * values are equal bytes.
 */
#ifndef HX_JSON_H
#define HX_JSON_H

#include <stddef.h>

struct json_t;  /* jansson's json_t */

/* Canonical JSON text of j: malloc'd, NULL on OOM. */
char *hx_json_canonical(const struct json_t *j);
/* Canonicalizes a JSON text (any valid JSON value, duplicate keys refused):
 * malloc'd, NULL when invalid or out of memory. */
char *hx_json_canonical_text(const char *json, size_t len);

#endif /* HX_JSON_H */
