/*
 * harness/cache/prefixset.c: cached prefixes (see prefixset.h). One hash map
 * from a prefix hash h to the entries holding that prefix (a doubly linked
 * list through each entry's link at that depth, most recent first) and to
 * the entry that is exactly that prefix.
 */
#include "prefixset.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

typedef struct link {
    int32_t prev, next;  /* entries holding the same prefix (the same depth) */
} link;

typedef struct entry {
    int32_t  *words;   /* (n * page) */
    uint64_t *h;       /* (n) */
    link     *links;   /* (n) */
    int32_t   n;
    int64_t   origin;
    bool      live;
} entry;

typedef struct mslot {
    uint64_t key;    /* 0: empty */
    int32_t  head;   /* the most recent entry holding the prefix */
    int32_t  exact;  /* the entry that is the prefix, -1 */
    int32_t  count;  /* entries holding it */
} mslot;

struct hx_prefixset {
    int32_t   page;
    int64_t   budget, held, evicted;
    hx_evict *ev;
    entry    *e;
    int32_t   n_e, cap_e, live;
    int32_t  *free_ids;
    int32_t   n_free, cap_free;
    mslot    *map;
    int64_t   map_cap, map_n;
};

hx_prefixset *hx_prefixset_new(int32_t page, hx_evict_kind kind, int64_t budget) {
    if (page < 1 || budget < 0) return NULL;
    hx_prefixset *s = calloc(1, sizeof *s);
    if (!s || !(s->ev = hx_evict_new(kind, budget))) { free(s); return NULL; }
    s->page = page;
    s->budget = budget;
    return s;
}

static void entry_clear(entry *x) {
    free(x->words);
    free(x->h);
    free(x->links);
    x->words = NULL;
    x->h = NULL;
    x->links = NULL;
    x->live = false;
}

void hx_prefixset_free(hx_prefixset *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n_e; i++) entry_clear(&s->e[i]);
    free(s->e);
    free(s->free_ids);
    free(s->map);
    hx_evict_free(s->ev);
    free(s);
}

// ----------------------------------------------------------------------------
// The map (open addressing, backward-shift deletion)

static int64_t home(const hx_prefixset *s, uint64_t key) {
    return (int64_t)(key * 0x9E3779B97F4A7C15ULL >> 17) & (s->map_cap - 1);
}

static int64_t slot_of(const hx_prefixset *s, uint64_t key) {
    if (!s->map_cap) return -1;
    int64_t i = home(s, key);
    while (s->map[i].key && s->map[i].key != key) i = (i + 1) & (s->map_cap - 1);
    return i;
}

static const mslot *lookup(const hx_prefixset *s, uint64_t key) {
    int64_t i = slot_of(s, key);
    return i >= 0 && s->map[i].key ? &s->map[i] : NULL;
}

static int map_grow(hx_prefixset *s) {
    int64_t cap = s->map_cap ? 2 * s->map_cap : 1024;
    mslot *old = s->map;
    int64_t old_cap = s->map_cap;
    mslot *m = calloc((size_t)cap, sizeof *m);
    if (!m) return ENG_ERR_NOMEM;
    s->map = m;
    s->map_cap = cap;
    for (int64_t i = 0; i < old_cap; i++)
        if (old[i].key) s->map[slot_of(s, old[i].key)] = old[i];
    free(old);
    return ENG_OK;
}

/* The slot of key, created empty when absent (NULL on OOM). */
static mslot *upsert(hx_prefixset *s, uint64_t key) {
    if ((s->map_n + 1) * 2 > s->map_cap && map_grow(s) != ENG_OK) return NULL;
    int64_t i = slot_of(s, key);
    if (!s->map[i].key) {
        s->map[i] = (mslot){key, -1, -1, 0};
        s->map_n++;
    }
    return &s->map[i];
}

static void map_del(hx_prefixset *s, uint64_t key) {
    int64_t mask = s->map_cap - 1, i = slot_of(s, key);
    if (i < 0 || !s->map[i].key) return;
    s->map_n--;
    for (int64_t j = i;;) {
        s->map[i].key = 0;
        for (;;) {
            j = (j + 1) & mask;
            if (!s->map[j].key) return;
            int64_t h = home(s, s->map[j].key);
            if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) break;
        }
        s->map[i] = s->map[j];
        i = j;
    }
}

// ----------------------------------------------------------------------------
// Entries

static int32_t take_id(hx_prefixset *s) {
    if (s->n_free) return s->free_ids[--s->n_free];
    if (s->n_e == s->cap_e) {
        int32_t cap = s->cap_e ? 2 * s->cap_e : 64;
        entry *g = realloc(s->e, sizeof *g * (size_t)cap);
        if (!g) return -1;
        memset(g + s->cap_e, 0, sizeof *g * (size_t)(cap - s->cap_e));
        s->e = g;
        s->cap_e = cap;
    }
    return s->n_e++;
}

static void give_id(hx_prefixset *s, int32_t id) {
    if (s->n_free == s->cap_free) {
        int32_t cap = s->cap_free ? 2 * s->cap_free : 64;
        int32_t *v = realloc(s->free_ids, sizeof *v * (size_t)cap);
        if (!v) return;
        s->free_ids = v;
        s->cap_free = cap;
    }
    s->free_ids[s->n_free++] = id;
}

/* Unlinks entry id from the map and frees it. */
static void unlink_entry(hx_prefixset *s, int32_t id, bool evicted) {
    entry *x = &s->e[id];
    for (int32_t i = 0; i < x->n; i++) {
        int64_t k = slot_of(s, x->h[i]);
        ENG_ASSERT(k >= 0 && s->map[k].key);
        mslot *m = &s->map[k];
        link *l = &x->links[i];
        if (l->prev >= 0) s->e[l->prev].links[i].next = l->next;
        else m->head = l->next;
        if (l->next >= 0) s->e[l->next].links[i].prev = l->prev;
        if (m->exact == id) m->exact = -1;
        if (--m->count == 0) map_del(s, x->h[i]);
    }
    hx_evict_drop(s->ev, id, evicted);
    s->held -= x->n;
    s->live--;
    entry_clear(x);
    give_id(s, id);
}

void hx_prefixset_remove(hx_prefixset *s, int32_t id) {
    ENG_ASSERT(id >= 0 && id < s->n_e && s->e[id].live);
    unlink_entry(s, id, false);
}

/* Moves entry id to the head of every list it is in (the most recent holder). */
static void to_front(hx_prefixset *s, int32_t id) {
    entry *x = &s->e[id];
    for (int32_t i = 0; i < x->n; i++) {
        mslot *m = &s->map[slot_of(s, x->h[i])];
        if (m->head == id) continue;
        link *l = &x->links[i];
        s->e[l->prev].links[i].next = l->next;
        if (l->next >= 0) s->e[l->next].links[i].prev = l->prev;
        l->prev = -1;
        l->next = m->head;
        s->e[m->head].links[i].prev = id;
        m->head = id;
    }
}

void hx_prefixset_touch(hx_prefixset *s, int32_t id, uint64_t stamp) {
    ENG_ASSERT(id >= 0 && id < s->n_e && s->e[id].live);
    hx_evict_use(s->ev, id, stamp);
    hx_evict_hit(s->ev, id);
    to_front(s, id);
}

int hx_prefixset_add(hx_prefixset *s, const int32_t *words, const uint64_t *h, int32_t n, int64_t origin,
                     uint64_t stamp, int32_t *id) {
    *id = -1;
    if (n <= 0) return ENG_OK;
    int32_t have = hx_prefixset_find(s, h, n);
    if (have >= 0) {
        hx_prefixset_touch(s, have, stamp);
        *id = have;
        return ENG_OK;
    }
    if (s->budget && n > s->budget) return ENG_OK;
    while (s->budget && s->held + n > s->budget) {
        int32_t v = hx_evict_victim(s->ev);
        if (v < 0) return ENG_OK;
        s->evicted += s->e[v].n;
        unlink_entry(s, v, true);
    }
    int32_t k = take_id(s);
    if (k < 0) return ENG_ERR_NOMEM;
    entry *x = &s->e[k];
    x->words = malloc(sizeof(int32_t) * (size_t)n * (size_t)s->page);
    x->h = malloc(sizeof(uint64_t) * (size_t)n);
    x->links = malloc(sizeof(link) * (size_t)n);
    if (!x->words || !x->h || !x->links || hx_evict_add(s->ev, k, stamp, h[n - 1], n) != ENG_OK) {
        entry_clear(x);
        give_id(s, k);
        return ENG_ERR_NOMEM;
    }
    memcpy(x->words, words, sizeof(int32_t) * (size_t)n * (size_t)s->page);
    memcpy(x->h, h, sizeof(uint64_t) * (size_t)n);
    x->n = n;
    x->origin = origin;
    x->live = true;
    for (int32_t i = 0; i < n; i++) {
        mslot *m = upsert(s, h[i]);
        if (!m) {  /* undo the links made so far */
            x->n = i;
            unlink_entry(s, k, false);
            return ENG_ERR_NOMEM;
        }
        x->links[i] = (link){-1, m->head};
        if (m->head >= 0) s->e[m->head].links[i].prev = k;
        m->head = k;
        m->count++;
        if (i == n - 1) m->exact = k;
    }
    hx_evict_candidate(s->ev, k, true);
    s->held += n;
    s->live++;
    *id = k;
    return ENG_OK;
}

int32_t hx_prefixset_common(const hx_prefixset *s, const uint64_t *h, int32_t n, int32_t *id) {
    int32_t k = 0, best = -1;
    for (; k < n; k++) {
        const mslot *m = lookup(s, h[k]);
        if (!m) break;
        best = m->head;
    }
    *id = best;
    return k;
}

int32_t hx_prefixset_within(const hx_prefixset *s, const uint64_t *h, int32_t n, int32_t *id) {
    *id = -1;
    for (int32_t k = n; k > 0; k--) {
        const mslot *m = lookup(s, h[k - 1]);
        if (m && m->exact >= 0) {
            *id = m->exact;
            return k;
        }
    }
    return 0;
}

int32_t hx_prefixset_find(const hx_prefixset *s, const uint64_t *h, int32_t n) {
    if (n <= 0) return -1;
    const mslot *m = lookup(s, h[n - 1]);
    return m ? m->exact : -1;
}

const int32_t *hx_prefixset_words(const hx_prefixset *s, int32_t id) { return s->e[id].words; }
int32_t hx_prefixset_blocks(const hx_prefixset *s, int32_t id) { return s->e[id].n; }
int64_t hx_prefixset_origin(const hx_prefixset *s, int32_t id) { return s->e[id].origin; }
int64_t hx_prefixset_held(const hx_prefixset *s) { return s->held; }
int32_t hx_prefixset_entries(const hx_prefixset *s) { return s->live; }
int64_t hx_prefixset_evicted(const hx_prefixset *s) { return s->evicted; }

int hx_prefixset_check(const hx_prefixset *s, char *err, size_t errlen) {
    int64_t held = 0;
    int32_t live = 0;
    for (int32_t id = 0; id < s->n_e; id++) {
        const entry *x = &s->e[id];
        if (!x->live) continue;
        live++;
        held += x->n;
        for (int32_t i = 0; i < x->n; i++) {
            const mslot *m = lookup(s, x->h[i]);
            bool in = false;
            for (int32_t k = m ? m->head : -1, steps = 0; k >= 0 && steps <= s->n_e; k = s->e[k].links[i].next, steps++)
                in |= k == id;
            if (!in) {
                eng_errf(err, errlen, "prefix set: entry %d is not listed under its prefix of %d blocks", id, i + 1);
                return ENG_ERR_FORMAT;
            }
        }
        if (hx_prefixset_find(s, x->h, x->n) != id) {
            eng_errf(err, errlen, "prefix set: entry %d is not found by its own content", id);
            return ENG_ERR_FORMAT;
        }
    }
    if (held != s->held || live != s->live || live != hx_evict_entries(s->ev) || (s->budget && held > s->budget)) {
        eng_errf(err, errlen, "prefix set: %d entries of %lld blocks (counted %d, %lld; ordered %d; budget %lld)", live,
                 (long long)held, s->live, (long long)s->held, hx_evict_entries(s->ev), (long long)s->budget);
        return ENG_ERR_FORMAT;
    }
    return ENG_OK;
}
