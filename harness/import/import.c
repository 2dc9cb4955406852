/*
 * harness/import/import.c: the importer registry and what every
 * importer shares: line and JSON helpers, sessions by key with responses
 * from the next request (anthropic, openai), the --system-file/--tools-file
 * overrides and the entry points (rules in import.h, docs/transcripts.md).
 *
 * One importer per file under import/importers/ (importer.h): it turns
 * its input into hx_requests with the shared JSON rules of transcript.c
 * (blocks, messages, tools).
 * Invariants: output requests are in input order; turns count from 0 per
 * session; nothing in the input can make an importer crash or loop.
 */
#include "import.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "api.h"
#include "cc_standin.h"
#include "errors.h"
#include "importer.h"
#include "json.h"
#include "jsonl.h"
#include "normalize.h"
#include "status.h"
#include "str.h"
#include "util.h"

// ----------------------------------------------------------------------------
// The registry: one line per importer. X(id) names hx_importer_<id>, defined
// in import/importers/<id>.c; the order is --help's, and the first four
// are the values of hx_import_format (import.h).

#define HX_IMPORTER_LIST(X) \
    X(anthropic)            \
    X(openai)               \
    X(claude_code)          \
    X(swe_agent)            \
    X(codex)                \
    X(gemini_cli)           \
    /* one line per importer, above this one */

#define DECLARE(id) extern const hx_importer hx_importer_##id;
#define ENTRY(id) &hx_importer_##id,
HX_IMPORTER_LIST(DECLARE)
const hx_importer *const hx_importers[] = {HX_IMPORTER_LIST(ENTRY) NULL};

const hx_importer *hx_importer_at(int format) {
    for (int i = 0; hx_importers[i]; i++)
        if (i == format) return hx_importers[i];
    return NULL;
}

int hx_import_format_from_name(const char *name) {
    for (int i = 0; name && hx_importers[i]; i++)
        if (!strcmp(name, hx_importers[i]->name)) return i;
    return ENG_ERR_NOT_FOUND;
}

const char *hx_import_format_name(hx_import_format f) {
    const hx_importer *imp = hx_importer_at((int)f);
    return imp ? imp->name : "?";
}

void hx_imp_fieldf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, HX_IMP_FIELD_MAX, fmt, ap);
    va_end(ap);
}

// ----------------------------------------------------------------------------
// Small helpers: lines, JSON, session names

/* Next non-blank line of data: [*s, *s + *len) without "\r\n"; false at the end. */
bool hx_imp_next_line(const char *data, size_t n, size_t *pos, int64_t *lineno, const char **s, size_t *len) {
    while (*pos < n) {
        const char *p = data + *pos;
        const char *nl = memchr(p, '\n', n - *pos);
        size_t l = nl ? (size_t)(nl - p) : n - *pos;
        *pos += l + (nl ? 1 : 0);
        (*lineno)++;
        if (l > 0 && p[l - 1] == '\r') l--;
        bool blank = true;
        for (size_t i = 0; i < l && blank; i++)
            if (p[i] != ' ' && p[i] != '\t') blank = false;
        if (blank) continue;
        *s = p;
        *len = l;
        return true;
    }
    return false;
}

json_t *hx_imp_load_line(const char *data, size_t n, const char *s, size_t len, const char *path, int64_t line,
                         size_t *n_big, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = hx_jsonl_load(s, len, n_big, &je);
    if (!j) {
        hx_jsonl_explain(data, n, path, line, je.column, je.text, err, errlen);
        return NULL;
    }
    if (!json_is_object(j)) {
        if (json_is_array(j))
            hx_errf_at(err, errlen, path, line, NULL, "expected a JSON object, found an array (JSONL holds one object "
                       "per line; a file that is one array converts with: jq -c '.[]' %s)", path);
        else
            hx_errf_at(err, errlen, path, line, NULL, "expected a JSON object");
        json_decref(j);
        return NULL;
    }
    return j;
}

/* The file name of path without directories and without its last extension. */
void hx_imp_base_name(const char *path, char *out, size_t n) {
    const char *b = strrchr(path ? path : "", '/');
    b = b ? b + 1 : (path ? path : "");
    snprintf(out, n, "%s", *b ? b : "import");
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = '\0';
}

void hx_imp_free_blocks(hx_block *b, int32_t n) {
    for (int32_t i = 0; i < n; i++) hx_block_free(&b[i]);
    free(b);
}

void hx_imp_free_tools(hx_tool *t, int32_t n) {
    for (int32_t i = 0; i < n; i++) hx_tool_free(&t[i]);
    free(t);
}

/* Appends copies of src's blocks to dst. */
int hx_imp_append_blocks(hx_message *dst, const hx_message *src) {
    for (int32_t i = 0; i < src->n_blocks; i++) {
        hx_block b;
        if (hx_block_copy(&b, &src->blocks[i])) return ENG_ERR_NOMEM;
        if (hx_message_push_block(dst, &b)) {
            hx_block_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    return ENG_OK;
}


void hx_imp_standin_free(hx_imp_standin *s) {
    hx_imp_free_blocks(s->system, s->n_system);
    hx_imp_free_tools(s->tools, s->n_tools);
    memset(s, 0, sizeof *s);
}

int hx_imp_standin_apply(const hx_imp_standin *s, hx_request *q, const char *req_id) {
    if (s->n_system) {
        if (!(q->system = calloc((size_t)s->n_system, sizeof *q->system))) return ENG_ERR_NOMEM;
        for (int32_t i = 0; i < s->n_system; i++, q->n_system++)
            if (hx_block_copy(&q->system[i], &s->system[i])) return ENG_ERR_NOMEM;
        if (s->billing && req_id && hx_cc_billing_cch(&q->system[0].text, req_id)) return ENG_ERR_NOMEM;
    }
    if (s->n_tools) {
        if (!(q->tools = calloc((size_t)s->n_tools, sizeof *q->tools))) return ENG_ERR_NOMEM;
        for (int32_t i = 0; i < s->n_tools; i++, q->n_tools++)
            if (hx_tool_copy(&q->tools[i], &s->tools[i])) return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Sessions by key, responses from the next request (anthropic, openai)

typedef struct linker {
    hx_strmap keys;      /* session key -> session index */
    int32_t  *last;      /* (n) index in out->reqs of each session's latest request */
    int32_t  *turns;     /* (n) next turn of each session */
    int32_t   n;
} linker;

static void linker_free(linker *L) {
    hx_strmap_free(&L->keys);
    free(L->last);
    free(L->turns);
    memset(L, 0, sizeof *L);
}

static bool extends(const hx_request *prev, const hx_request *next) {
    if (next->n_messages <= prev->n_messages) return false;
    for (int32_t i = 0; i < prev->n_messages; i++)
        if (!hx_message_equal(&prev->messages[i], &next->messages[i])) return false;
    return next->messages[prev->n_messages].role == HX_ROLE_ASSISTANT;
}

/* Assigns q a session and turn, links the previous request's response, and
 * pushes q onto out (taking it). */
static int link_push(linker *L, hx_transcript *out, hx_request *q, const char *prefix) {
    char *key = hx_request_session_key(q);
    if (!key) return ENG_ERR_NOMEM;
    int64_t s;
    int rc = ENG_OK;
    if (!hx_strmap_get(&L->keys, key, &s)) {
        int32_t *nl = realloc(L->last, (size_t)(L->n + 1) * sizeof *nl);
        if (nl) L->last = nl;
        int32_t *nt = realloc(L->turns, (size_t)(L->n + 1) * sizeof *nt);
        if (nt) L->turns = nt;
        if (!nl || !nt || hx_strmap_put(&L->keys, key, L->n)) {
            free(key);
            return ENG_ERR_NOMEM;
        }
        s = L->n++;
        L->last[s] = -1;
        L->turns[s] = 0;
    }
    free(key);
    char name[512];
    snprintf(name, sizeof name, "%s-%lld", prefix, (long long)s);
    free(q->session);
    if (!(q->session = hx_strdup(name))) return ENG_ERR_NOMEM;
    q->turn = L->turns[s]++;
    if (L->last[s] >= 0) {
        hx_request *prev = &out->reqs[L->last[s]];
        if (extends(prev, q)) {
            hx_message_free(&prev->response);
            if ((rc = hx_message_copy(&prev->response, &q->messages[prev->n_messages]))) return rc;
        }
    }
    if ((rc = hx_transcript_push(out, q))) return rc;
    L->last[s] = out->n - 1;
    return ENG_OK;
}

void hx_imp_list_add(char *list, size_t cap, const char *name) {
    if (!name || !name[0]) return;
    size_t tl = strlen(name), have = strlen(list);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += tl)
        if ((p == list || p[-1] == ',') && (p[tl] == ',' || p[tl] == '\0')) return;
    if (have + tl + 2 < cap) snprintf(list + have, cap - have, "%s%s", have ? "," : "", name);
}

static void note_path(void *ud, const char *path) {
    hx_import_stats *st = ud;
    hx_imp_list_add(st->unknown_field_paths, sizeof st->unknown_field_paths, path);
}

void hx_imp_note_unknown(const hx_import_opts *o, const json_t *j, const struct hx_api_shape *shape, const char *prefix) {
    if (o->stats && shape) o->stats->unknown_fields += hx_api_walk_unknown(j, shape, prefix, note_path, o->stats);
}

int hx_imp_bodies(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                  int64_t *n_skipped, hx_imp_request_fn request, const struct hx_api_shape *shape, char *err,
                  size_t errlen) {
    char prefix[256];
    if (o->session) snprintf(prefix, sizeof prefix, "%s", o->session);
    else hx_imp_base_name(path, prefix, sizeof prefix);
    linker L = {0};
    size_t pos = 0;
    int64_t lineno = 0;
    const char *s;
    size_t len;
    int rc = ENG_OK;
    while (hx_imp_next_line(data, n, &pos, &lineno, &s, &len)) {
        size_t n_big = 0;
        json_t *j = hx_imp_load_line(data, n, s, len, path, lineno, &n_big, err, errlen);
        hx_request q;
        rc = ENG_ERR_FORMAT;
        if (j && n_big) { /* an integer beyond 2^63-1 where the importer reads is refused; elsewhere counted */
            static const char *const k_read[] = {"system", "tools", "messages"};
            char f[HX_IMP_FIELD_MAX];
            for (size_t k = 0; k < 3 && j; k++) {
                if (hx_json_find_big(json_object_get(j, k_read[k]), k_read[k], f, sizeof f)) {
                    hx_errf_at(err, errlen, path, lineno, f, "an integer beyond 2^63-1 (it cannot be kept exactly)");
                    json_decref(j);
                    j = NULL;
                }
            }
            if (j && o->stats) o->stats->big_integers += (int64_t)n_big;
        }
        if (j) {
            rc = request(j, path, lineno, &q, err, errlen);
            if (rc == ENG_OK) hx_imp_note_unknown(o, j, shape, "");
            json_decref(j);
        }
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc) break;
        if ((rc = link_push(&L, out, &q, prefix))) {
            hx_request_free(&q);
            break;
        }
    }
    linker_free(&L);
    return rc;
}

// ----------------------------------------------------------------------------
// Overrides (--system-file, --tools-file) and entry points

static bool utf8_ok(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);  /* jansson refuses invalid UTF-8 */
    json_decref(j);
    return j != NULL;
}

static int load_overrides(const hx_import_opts *o, hx_imp_standin *s, char *err, size_t errlen) {
    char *data = NULL;
    size_t n = 0;
    int rc = ENG_OK;
    if (o->system_file) {
        if ((rc = eng_read_file(o->system_file, &data, &n, err, errlen))) return rc;
        size_t bom = n >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3) ? 3 : 0;
        size_t i = bom;
        while (i < n && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t')) i++;
        json_error_t je;
        json_t *j = (i < n && (data[i] == '[' || data[i] == '"'))
                        ? json_loadb(data + bom, n - bom, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je) : NULL;
        if (j) {
            rc = hx_system_from_json(j, o->system_file, 0, "system", &s->system, &s->n_system, err, errlen);
            json_decref(j);
        } else if (memchr(data, '\0', n)) {
            hx_errf_at(err, errlen, o->system_file, 0, NULL, "contains a NUL byte");
            rc = ENG_ERR_FORMAT;
        } else if (!utf8_ok(data + bom, n - bom)) {
            hx_errf_at(err, errlen, o->system_file, 0, NULL, "is not valid UTF-8 text");
            rc = ENG_ERR_FORMAT;
        } else if (!(s->system = calloc(1, sizeof *s->system)) ||
                   hx_block_init(&s->system[0], HX_BLOCK_TEXT, data + bom, NULL, NULL, NULL, false)) {
            rc = ENG_ERR_NOMEM;
        } else {
            s->n_system = 1;
        }
        free(data);
        if (rc) return rc;
    }
    if (o->tools_file) {
        if ((rc = eng_read_file(o->tools_file, &data, &n, err, errlen))) return rc;
        json_error_t je;
        json_t *j = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
        free(data);
        if (!j) {
            hx_errf_at(err, errlen, o->tools_file, je.line, NULL, "invalid JSON at column %d: %s", je.column, je.text);
            return ENG_ERR_FORMAT;
        }
        rc = hx_tools_from_json(j, o->tools_file, 0, "tools", &s->tools, &s->n_tools, err, errlen);
        json_decref(j);
        if (rc) return rc;
        if (s->n_tools == 0) s->tools = (free(s->tools), NULL);
    }
    return ENG_OK;
}

/* The header of an imported transcript: format, source, counts (canonical JSON). */
static int make_header(const hx_import_opts *o, const char *path, const hx_transcript *t, int64_t skipped,
                       const hx_import_stats *st, char **out) {
    hx_strmap seen = {0};
    int32_t n_sessions = 0;
    for (int32_t i = 0; i < t->n; i++)
        if (!hx_strmap_get(&seen, t->reqs[i].session, NULL)) {
            if (hx_strmap_put(&seen, t->reqs[i].session, i)) {
                hx_strmap_free(&seen);
                return ENG_ERR_NOMEM;
            }
            n_sessions++;
        }
    hx_strmap_free(&seen);
    const char *base = strrchr(path, '/');
    json_t *h = json_pack("{s:s,s:s,s:i,s:i,s:I}", "format", hx_import_format_name(o->format), "source",
                          base ? base + 1 : path, "requests", t->n, "sessions", n_sessions, "skipped_lines",
                          (json_int_t)skipped);
    if (!h) return ENG_ERR_NOMEM;
    int bad = 0;
    const struct {
        const char *key;
        int64_t     v;
    } counts[] = {
        {"dropped_requests", st->dropped_requests},     {"relinked_api_errors", st->relinked},
        {"unknown_blocks", st->unknown_blocks},         {"tool_references", st->tool_references},
        {"empty_thinking_dropped", st->empty_thinking}, {"synthetic_messages", st->synthetic},
        {"api_error_messages_left_out", st->api_error_messages}, {"attachments_sent", st->attachments},
        {"attachments_not_sent", st->attachments_unsent}, {"unknown_attachments", st->unknown_attachments},
        {"big_integers", st->big_integers},             {"subagent_sessions", st->sidechain_sessions},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].v) bad |= json_object_set_new(h, counts[i].key, json_integer(counts[i].v));
    if (st->unknown_types[0]) bad |= json_object_set_new(h, "unknown_block_types", json_string(st->unknown_types));
    if (st->unknown_attachment_types[0])
        bad |= json_object_set_new(h, "unknown_attachment_types", json_string(st->unknown_attachment_types));
    const hx_importer *imp = hx_importer_at(o->format);
    if (o->system_file) bad |= json_object_set_new(h, "system_file", json_string(o->system_file));
    if (o->tools_file) bad |= json_object_set_new(h, "tools_file", json_string(o->tools_file));
    if (imp && imp->own_prefix && (!o->system_file || !o->tools_file))
        bad |= json_object_set_new(h, "stand_in", json_string("built-in Claude Code stand-in (docs/transcripts.md)"));
    char vol[64];
    int32_t n_vol = 0;
    if (!bad && hx_import_volatile(t, vol, sizeof vol, &n_vol) == ENG_OK && vol[0])
        bad |= json_object_set_new(h, "volatile", json_pack("{s:s,s:i}", "normalize", vol, "requests", n_vol));
    *out = bad ? NULL : hx_json_canonical(h);
    json_decref(h);
    return *out ? ENG_OK : ENG_ERR_NOMEM;
}

int hx_import_volatile(const hx_transcript *t, char *buf, size_t len, int32_t *n_requests) {
    static const char *const rules[] = {"anthropic-cch"};
    buf[0] = '\0';
    *n_requests = 0;
    size_t off = 0;
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        hx_normalize nz;
        if (hx_normalize_parse(rules[k], &nz)) continue;
        int32_t changed = 0;
        for (int32_t i = 0; i < t->n; i++) {
            hx_request c;
            if (hx_request_copy(&c, &t->reqs[i])) return ENG_ERR_NOMEM;
            int r = hx_normalize_apply(&nz, &c);
            hx_request_free(&c);
            if (r < 0) return ENG_ERR_NOMEM;
            changed += r > 0;
        }
        if (changed > 0) {
            int w = snprintf(buf + off, len - off, "%s%s", off ? "," : "", rules[k]);
            if (w > 0 && (size_t)w < len - off) off += (size_t)w;
            if (changed > *n_requests) *n_requests = changed;
        }
    }
    return ENG_OK;
}

int hx_import_buffer(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                     int64_t *n_skipped, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int64_t skipped_local = 0;
    if (!n_skipped) n_skipped = &skipped_local;
    *n_skipped = 0;
    if (!path) path = "-";
    hx_import_stats st_local = {0};
    hx_import_opts oo = *o;
    if (!oo.stats) oo.stats = &st_local;
    int64_t start = hx_jsonl_start(data, n, path, err, errlen);
    if (start < 0) return ENG_ERR_FORMAT;
    data += start;
    n -= (size_t)start;
    hx_imp_standin si = {0};
    int rc = load_overrides(o, &si, err, errlen);
    if (rc) {
        hx_imp_standin_free(&si);
        return rc;
    }
    if (!(out->path = hx_strdup(path))) {
        hx_imp_standin_free(&si);
        return ENG_ERR_NOMEM;
    }
    const hx_importer *imp = hx_importer_at(o->format);
    if (imp) {
        rc = imp->import(&oo, path, data, n, out, n_skipped, &si, err, errlen);
    } else {
        eng_errf(err, errlen, "import: unknown format %d", (int)o->format);
        rc = ENG_ERR_ARG;
    }
    /* overrides replace the system prompt / tools of formats that carry their own */
    if (rc == ENG_OK && !imp->own_prefix && (o->system_file || o->tools_file)) {
        for (int32_t i = 0; i < out->n && rc == ENG_OK; i++) {
            hx_request *q = &out->reqs[i];
            hx_imp_standin part = si;
            if (o->system_file) {
                hx_imp_free_blocks(q->system, q->n_system);
                q->system = NULL, q->n_system = 0;
            } else {
                part.n_system = 0;
            }
            if (o->tools_file) {
                hx_imp_free_tools(q->tools, q->n_tools);
                q->tools = NULL, q->n_tools = 0;
            } else {
                part.n_tools = 0;
            }
            rc = hx_imp_standin_apply(&part, q, NULL);
        }
    }
    hx_imp_standin_free(&si);
    oo.stats->skipped_lines = *n_skipped;
    if (rc == ENG_OK) rc = make_header(&oo, path, out, *n_skipped, oo.stats, &out->header);
    if (rc) hx_transcript_free(out);
    return rc;
}

int hx_import_file(const hx_import_opts *o, const char *path, hx_transcript *out, int64_t *n_skipped, char *err,
                   size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n_skipped) *n_skipped = 0;
    char *data = NULL;
    size_t n = 0;
    int rc = eng_read_file(path, &data, &n, err, errlen);
    if (rc) return rc;
    rc = hx_import_buffer(o, path, data, n, out, n_skipped, err, errlen);
    free(data);
    return rc;
}
