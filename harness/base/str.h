/*
 * harness/base/str.h: strings and a string -> int64 map: what every part of
 * the harness uses to own text and look it up.
 */
#ifndef HX_STR_H
#define HX_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A malloc'd copy of s; NULL when s is NULL or out of memory. */
char *hx_strdup(const char *s);

/* A string -> int64 hash map (open addressing on XXH3, keys copied). Zero-
 * initialized is empty; hx_strmap_free leaves it empty again. */
typedef struct hx_strmap {
    char   **keys;  /* (cap) NULL = empty slot */
    int64_t *vals;  /* (cap) */
    size_t   cap, n;
} hx_strmap;
int  hx_strmap_put(hx_strmap *m, const char *key, int64_t val);  /* insert or overwrite; ENG_OK or ENG_ERR_NOMEM */
bool hx_strmap_get(const hx_strmap *m, const char *key, int64_t *val);  /* val may be NULL */
void hx_strmap_free(hx_strmap *m);

#endif /* HX_STR_H */
