/*
 * harness/import/importers/importer.h: the importer interface, and the
 * helpers every importer shares (defined in import/import.c).
 *
 * An importer is one file here that defines a `const hx_importer
 * hx_importer_<id>` (its --from name, help line, options and import
 * function) and one X(<id>) line in import.c's registry. Its import
 * function converts the whole input into requests of out (sessions and
 * turns set), honouring o->skip_bad (count in *n_skipped) and o->session;
 * it returns ENG_OK, ENG_ERR_FORMAT with "FILE:LINE: FIELD: what" in err,
 * or ENG_ERR_NOMEM. The --system-file/--tools-file overrides are applied to
 * its requests afterwards by import.c, unless it sets own_prefix and applies
 * si (the loaded overrides, which it may complete with a stand-in) itself.
 */
#ifndef HX_IMPORTER_H
#define HX_IMPORTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "transcript.h"

typedef struct hx_import_opts hx_import_opts;  /* import.h */

/* The stand-in (or override) system prompt and tools for one request. */
typedef struct hx_imp_standin {
    hx_block *system;
    int32_t   n_system;
    hx_tool  *tools;
    int32_t   n_tools;
    bool      billing;  /* system[0] is the stand-in billing header (per-request cch) */
} hx_imp_standin;

typedef struct hx_importer {
    const char      *name;        /* --from NAME */
    const char      *help;        /* its line in `kvreplay import --help` */
    const hx_option *options;     /* its own options ({0}-terminated, fields of its struct), or NULL */
    const void      *defaults;    /* that struct with every default; o->format_opts when NULL */
    size_t           opts_size;
    bool             own_prefix;  /* it applies the system/tools overrides (si) itself */
    int (*import)(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                  int64_t *n_skipped, hx_imp_standin *si, char *err, size_t errlen);
} hx_importer;

/* The registered importers, NULL-terminated, in hx_import_format order. */
extern const hx_importer *const hx_importers[];
/* The importer of format index f, or NULL. */
const hx_importer *hx_importer_at(int f);

// ----------------------------------------------------------------------------
// Shared helpers

#define HX_IMP_FIELD_MAX 320
/* Formats a JSON field path (e.g. "messages[3].content") into out (HX_IMP_FIELD_MAX bytes). */
void hx_imp_fieldf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Next non-blank line of data: [*s, *s + *len) without "\r\n"; false at the end. */
bool hx_imp_next_line(const char *data, size_t n, size_t *pos, int64_t *lineno, const char **s, size_t *len);
/* One line [s, s + len) of data (n bytes) as a JSON object, or NULL with
 * "FILE:LINE: ..." in err (saying so when data is one pretty-printed JSON
 * document). Integers beyond 2^63-1 are read as reals and counted in
 * *n_big (may be NULL; see jsonl.h). */
json_t *hx_imp_load_line(const char *data, size_t n, const char *s, size_t len, const char *path, int64_t line,
                         size_t *n_big, char *err, size_t errlen);
/* The file name of path without directories and without its last extension. */
void hx_imp_base_name(const char *path, char *out, size_t n);
void hx_imp_free_blocks(hx_block *b, int32_t n);
void hx_imp_free_tools(hx_tool *t, int32_t n);
/* Appends copies of src's blocks to dst. */
int  hx_imp_append_blocks(hx_message *dst, const hx_message *src);
void hx_imp_standin_free(hx_imp_standin *s);
/* Copies s's system blocks and tools into q (with the billing header's cch
 * from req_id when s->billing: hx_cc_billing_cch). */
int  hx_imp_standin_apply(const hx_imp_standin *s, hx_request *q, const char *req_id);

struct hx_api_shape;
/* Walks j against shape (api.h) and counts what it does not know into o->stats (unknown_fields and the
 * distinct paths, prefixed by prefix). No-op without stats. */
void hx_imp_note_unknown(const hx_import_opts *o, const json_t *j, const struct hx_api_shape *shape, const char *prefix);
/* A distinct name added to a comma list of cap bytes (truncated, never overflowing). */
void hx_imp_list_add(char *list, size_t cap, const char *name);

/* One request body (a JSON object of line `line`) -> *q. */
typedef int (*hx_imp_request_fn)(json_t *j, const char *path, int64_t line, hx_request *q, char *err, size_t errlen);
/* One request per line through request, then sessions by key (system prompt
 * after anthropic-cch normalization + first non-system message) and each
 * request's response from its session's next request (anthropic, openai);
 * the members of a body that shape does not name are counted (hx_imp_note_unknown). */
int hx_imp_bodies(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                  int64_t *n_skipped, hx_imp_request_fn request, const struct hx_api_shape *shape, char *err,
                  size_t errlen);

#endif /* HX_IMPORTER_H */
