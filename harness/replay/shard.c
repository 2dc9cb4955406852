/*
 * harness/replay/shard.c: the units of an experiment, their modeled cost and
 * their plan over shards (see shard.h).
 *
 * Everything the plan depends on is deterministic: token counts and FLOPs
 * (the cost model), the reference calibration's prices (or a constant), and
 * ties broken by index. Two processes that plan the same units therefore get
 * the same plan, and its digest (runs.plan_sha256) lets `kvreplay merge` see
 * when they did not.
 */
#include "shard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "calibrate.h"
#include "options.h"
#include "policy.h"
#include "prepare.h"
#include "sha256.h"
#include "status.h"
#include "transcript.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Inputs, loaded once per plan

typedef struct model_in {
    char      *path;
    eng_model *m;           /* default numerics: tokenizer, cost model, SHA-256 */
} model_in;

/* A transcript as one model's tokenizer, template and rules see it. */
typedef struct tr_in {
    char          *key;     /* model path, transcript, template, normalize, limit */
    int32_t        n;       /* requests */
    int32_t       *n_tok;   /* (n) prompt tokens */
    int32_t       *n_resp;  /* (n) response tokens (teacher-forced) */
    int32_t       *lcp;     /* (n) longest prefix shared with an earlier prompt, capped at its length */
    XXH128_hash_t *h;       /* (n) XXH3-128 of the prompt's tokens */
} tr_in;

typedef struct inputs {
    model_in *mods;
    int32_t   n_mods;
    tr_in    *trs;
    int32_t   n_trs;
} inputs;

static void inputs_free(inputs *in) {
    for (int32_t i = 0; i < in->n_mods; i++) {
        free(in->mods[i].path);
        eng_model_free(in->mods[i].m);
    }
    for (int32_t i = 0; i < in->n_trs; i++) {
        tr_in *t = &in->trs[i];
        free(t->key);
        free(t->n_tok);
        free(t->n_resp);
        free(t->lcp);
        free(t->h);
    }
    free(in->mods);
    free(in->trs);
}

static int get_model(inputs *in, const char *path, const eng_model **out, char *err, size_t errlen) {
    for (int32_t i = 0; i < in->n_mods; i++)
        if (!strcmp(in->mods[i].path, path)) {
            *out = in->mods[i].m;
            return ENG_OK;
        }
    model_in *g = realloc(in->mods, sizeof *g * (size_t)(in->n_mods + 1));
    if (!g) return ENG_ERR_NOMEM;
    in->mods = g;
    model_in *mi = &in->mods[in->n_mods];
    memset(mi, 0, sizeof *mi);
    const eng_numerics num = eng_numerics_default();
    int rc = eng_model_load(path, &num, &mi->m, err, errlen);
    if (rc != ENG_OK) return rc;
    if (!(mi->path = strdup(path))) {
        eng_model_free(mi->m);
        return ENG_ERR_NOMEM;
    }
    in->n_mods++;
    *out = mi->m;
    return ENG_OK;
}

static int32_t lcp_of(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t k = 0, n = na < nb ? na : nb;
    while (k < n && a[k] == b[k]) k++;
    return k;
}

/* Tokenizes u's transcript as its replay will (model, template, rules, limit). */
static int get_transcript(inputs *in, const hx_replay_opts *o, const eng_model *m, const tr_in **out, char *err,
                          size_t errlen) {
    char *key = NULL;
    eng_buf kb = {0};
    if (eng_buf_printf(&kb, "%s\n%s\n%s\n%s\n%d\n%d", o->sp.model_path, o->transcript_path,
                       o->sp.template_name ? o->sp.template_name : "", o->sp.normalize ? o->sp.normalize : "", o->limit,
                       o->skip_bad) != ENG_OK)
        return ENG_ERR_NOMEM;
    key = kb.data;
    for (int32_t i = 0; i < in->n_trs; i++)
        if (!strcmp(in->trs[i].key, key)) {
            free(key);
            *out = &in->trs[i];
            return ENG_OK;
        }
    tr_in *g = realloc(in->trs, sizeof *g * (size_t)(in->n_trs + 1));
    if (!g) {
        free(key);
        return ENG_ERR_NOMEM;
    }
    in->trs = g;
    tr_in *t = &in->trs[in->n_trs];
    memset(t, 0, sizeof *t);
    t->key = key;
    in->n_trs++;  /* freed with the rest, complete or not */

    hx_transcript tr = {0};
    hx_prepare_ctx *pc = NULL;
    int32_t **toks = NULL;
    int64_t skipped = 0;
    int rc = hx_transcript_read(o->transcript_path, o->skip_bad, &tr, &skipped, err, errlen);
    if (rc != ENG_OK) goto out;
    t->n = tr.n;
    if (o->limit > 0 && o->limit < t->n) t->n = o->limit;
    rc = hx_prepare_ctx_new(eng_model_tokenizer(m), o->sp.template_name, eng_model_get_info(m)->chat_template,
                            o->sp.normalize, &pc, err, errlen);
    if (rc != ENG_OK) goto out;
    hx_prepare_ctx_set_source(pc, o->transcript_path);
    const size_t n = (size_t)(t->n > 0 ? t->n : 1);
    t->n_tok = calloc(n, sizeof *t->n_tok);
    t->n_resp = calloc(n, sizeof *t->n_resp);
    t->lcp = calloc(n, sizeof *t->lcp);
    t->h = calloc(n, sizeof *t->h);
    toks = calloc(n, sizeof *toks);
    rc = ENG_ERR_NOMEM;
    if (!t->n_tok || !t->n_resp || !t->lcp || !t->h || !toks) goto out;
    for (int32_t i = 0; i < t->n; i++) {
        hx_prepared p;
        if ((rc = hx_prepare(pc, &tr.reqs[i], &p, err, errlen)) != ENG_OK) goto out;
        t->n_tok[i] = p.n;
        t->n_resp[i] = p.n_resp;
        t->h[i] = XXH3_128bits(p.tokens, sizeof(int32_t) * (size_t)p.n);
        toks[i] = p.tokens;  /* kept for the prefix comparisons below */
        p.tokens = NULL;
        hx_prepared_free(&p);
        for (int32_t j = 0; j < i; j++) {
            int32_t l = lcp_of(toks[i], t->n_tok[i], toks[j], t->n_tok[j]);
            if (l > t->lcp[i]) t->lcp[i] = l;
        }
    }
    rc = ENG_OK;
    *out = t;
out:
    for (int32_t i = 0; toks && i < t->n; i++) free(toks[i]);
    free(toks);
    hx_prepare_ctx_free(pc);
    hx_transcript_free(&tr);
    return rc;
}

// ----------------------------------------------------------------------------
// Modeled cost

/* One cold prefill of the unit (its own cost, keyed like the cold cache). */
typedef struct cold_key {
    XXH128_hash_t key;
    double        ms;
    int32_t       unit;
} cold_key;

typedef struct unit_cost {
    cold_key *keys;  /* (n_keys) */
    int32_t   n_keys;
    const char *dir; /* the policy's cache directory, or NULL */
} unit_cost;

/* The GFLOP/s unit u is priced at (and, in *what, which price it is). */
static int unit_price(const hx_unit *u, const eng_model *m, const char *calibration, double *gflops, char *err,
                      size_t errlen) {
    *gflops = HX_PLAN_NOMINAL_GFLOPS;
    if (!calibration) return ENG_OK;
    const int32_t len = u->o.sp.pp.align == ENG_ALIGN_NONE ? u->o.sp.pp.ubatch : u->o.sp.pp.chunk;
    hx_calibration cal;
    bool found = false;
    int rc = hx_calibration_lookup(calibration, eng_model_get_info(m)->sha256, &u->o.sp.num, len, &cal, &found, err,
                                   errlen);
    if (rc == ENG_OK && !found) {  /* measured and added now, under the file's lock: every shard plans at it */
        eng_model *mm = NULL;
        bool added = false;
        if ((rc = eng_model_load(u->o.sp.model_path, &u->o.sp.num, &mm, err, errlen)) == ENG_OK)
            rc = hx_calibration_reference(calibration, mm, &u->o.sp.pp, NULL, &cal, &added, err, errlen);
        eng_model_free(mm);
        if (rc == ENG_OK && added)
            fprintf(stderr, "kvreplay: %s: no calibration for %s (%s, %s, %d threads, chunk %d) yet: measured "
                    "(%.4g GFLOP/s) and added\n", calibration, eng_model_get_info(m)->name,
                    eng_kernel_name(u->o.sp.num.kernel), eng_precision_name(u->o.sp.num.precision), u->o.sp.num.n_threads, len,
                    cal.gflops);
    }
    if (rc == ENG_OK) *gflops = cal.gflops;
    return rc;
}

/* The cache directory of u's policy, when it declares --cache-dir (as given, or its default). */
static const char *unit_dir(const hx_unit *u) {
    const hx_policy_ops *ops = NULL;
    for (size_t i = 0; hx_policies[i]; i++)
        if (!strcmp(hx_policies[i]->name, u->o.sp.policy)) ops = hx_policies[i];
    if (!ops || !ops->options || !ops->defaults) return NULL;
    for (const hx_option *opt = ops->options; opt->name; opt++)
        if (!strcmp(opt->name, "--cache-dir") && opt->type == HX_OPT_STRING) {
            const char *dir = *(const char *const *)((const char *)ops->defaults + opt->offset);
            hx_policy_args_read(&u->o.sp.policy_args, "--cache-dir", &dir);
            return dir;
        }
    return NULL;
}

static int cost_unit(inputs *in, hx_unit *u, const char *calibration, unit_cost *c, char *err, size_t errlen) {
    const hx_replay_opts *o = &u->o;
    const eng_model *m = NULL;
    const tr_in *t = NULL;
    int rc;
    if ((rc = get_model(in, o->sp.model_path, &m, err, errlen)) != ENG_OK) return rc;
    if ((rc = get_transcript(in, o, m, &t, err, errlen)) != ENG_OK) return rc;
    double gflops;
    if ((rc = unit_price(u, m, calibration, &gflops, err, errlen)) != ENG_OK) return rc;
    const double per_ms = 1e3 / (gflops * 1e9);
    const int32_t R = o->sp.decode_n > 1 ? o->sp.decode_n : 1, rep = o->sp.repeat > 1 ? o->sp.repeat : 1;
    const int32_t C = o->sp.pp.chunk, coldlen = o->sp.pp.align == ENG_ALIGN_NONE ? o->sp.pp.ubatch : o->sp.pp.chunk;
    const bool cold_policy = !strcmp(o->sp.policy, "cold");
    /* the cold cache's key: model and numerics (threads and build matter to blas only), chunk shape, rows, prompt */
    const eng_model_info *mi = eng_model_get_info(m);
    int64_t hdr[4] = {o->sp.num.kernel, o->sp.num.precision, o->sp.num.kernel == ENG_KERNEL_BLAS ? o->sp.num.n_threads : 0,
                      (int64_t)coldlen * 100000 + R};
    c->keys = calloc((size_t)(t->n > 0 ? t->n : 1), sizeof *c->keys);
    if (!c->keys) return ENG_ERR_NOMEM;
    u->cold_ms = u->reuse_ms = 0;
    for (int32_t i = 0; i < t->n; i++) {
        const int32_t n = t->n_tok[i];
        int32_t r = cold_policy ? 0 : t->lcp[i];
        if (r >= n) r = n - 1;  /* at least the last token is prefilled */
        if (o->sp.pp.align == ENG_ALIGN_CHUNK && r > 0) r = r / C * C;
        if (r < 0) r = 0;
        const double step = eng_model_prefill_flops_params(m, n, 1, &o->sp.pp);
        const double cold = eng_model_prefill_flops_params(m, 0, n, &o->sp.pp) * rep + (R - 1) * step;
        const double reuse = eng_model_prefill_flops_params(m, r, n - r, &o->sp.pp) * rep + (R - 1 + t->n_resp[i]) * step;
        XXH3_state_t *s = XXH3_createState();
        if (!s) return ENG_ERR_NOMEM;
        XXH3_128bits_reset(s);
        XXH3_128bits_update(s, mi->sha256, strlen(mi->sha256));
        XXH3_128bits_update(s, hdr, sizeof hdr);
        XXH3_128bits_update(s, &t->h[i], sizeof t->h[i]);
        c->keys[i] = (cold_key){XXH3_128bits_digest(s), cold * per_ms, u->index};
        XXH3_freeState(s);
        u->cold_ms += cold * per_ms;
        u->reuse_ms += reuse * per_ms;
    }
    c->n_keys = t->n;
    c->dir = unit_dir(u);
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Groups: union-find over units

static int32_t uf_find(int32_t *p, int32_t i) {
    while (p[i] != i) i = p[i] = p[p[i]];
    return i;
}

static void uf_union(int32_t *p, int32_t a, int32_t b) {
    a = uf_find(p, a);
    b = uf_find(p, b);
    if (a < b) p[b] = a;  /* the root is the smallest unit: deterministic */
    else if (b < a) p[a] = b;
}

static int key_cmp(const void *a, const void *b) {
    const cold_key *x = a, *y = b;
    int c = XXH128_cmp(&x->key, &y->key);
    return c ? c : (x->unit > y->unit) - (x->unit < y->unit);
}

typedef struct dir_ref {
    const char *dir;
    int32_t     unit;
} dir_ref;

static int dir_cmp(const void *a, const void *b) {
    const dir_ref *x = a, *y = b;
    int c = strcmp(x->dir, y->dir);
    return c ? c : (x->unit > y->unit) - (x->unit < y->unit);
}

/* An item: units the plan places together (a group, or a part of one). */
typedef struct item {
    int32_t *units;  /* ascending */
    int32_t  n;
    int32_t  n_atoms;  /* parts it could be split into (units joined by a cache directory) */
    double   cost;
} item;

/* The modeled cost of a set of units run by one process: their reused paths,
 * and each distinct cold prefill once. in_set[u] marks the members. */
static double set_cost(const hx_unit *u, const unit_cost *uc, const bool *in_set, int32_t n, cold_key *scratch) {
    double ms = 0;
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!in_set[i]) continue;
        ms += u[i].reuse_ms;
        memcpy(scratch + k, uc[i].keys, sizeof *scratch * (size_t)uc[i].n_keys);
        k += uc[i].n_keys;
    }
    qsort(scratch, (size_t)k, sizeof *scratch, key_cmp);
    for (int32_t i = 0; i < k;) {  /* the costliest of equal keys (repeat counts may differ) */
        int32_t j = i;
        double mx = 0;
        for (; j < k && !XXH128_cmp(&scratch[j].key, &scratch[i].key); j++) mx = scratch[j].ms > mx ? scratch[j].ms : mx;
        ms += mx;
        i = j;
    }
    return ms;
}

static int item_cmp(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? 1 : -1;  /* costliest first */
    return (x->units[0] > y->units[0]) - (x->units[0] < y->units[0]);
}

/* Longest first, each to the least loaded shard (the lowest on a tie): sets
 * u[].shard; returns the longest shard's true load (distinct cold prefills
 * of a shard counted once) and fills load[]. */
static double lpt(hx_unit *u, const unit_cost *uc, int32_t n, item *items, int32_t n_items, int32_t n_shards,
                  double *load, bool *in_set, cold_key *scratch) {
    qsort(items, (size_t)n_items, sizeof *items, item_cmp);
    for (int32_t k = 0; k < n_shards; k++) load[k] = 0;
    for (int32_t i = 0; i < n_items; i++) {
        int32_t best = 0;
        for (int32_t k = 1; k < n_shards; k++)
            if (load[k] < load[best]) best = k;
        load[best] += items[i].cost;
        for (int32_t j = 0; j < items[i].n; j++) u[items[i].units[j]].shard = best + 1;
    }
    double mx = 0;
    for (int32_t k = 0; k < n_shards; k++) {
        for (int32_t i = 0; i < n; i++) in_set[i] = u[i].shard == k + 1;
        load[k] = set_cost(u, uc, in_set, n, scratch);
        if (load[k] > mx) mx = load[k];
    }
    return mx;
}

static void items_free(item *it, int32_t n) {
    for (int32_t i = 0; it && i < n; i++) free(it[i].units);
    free(it);
}

/* Items of the units whose root (in p) is the same: one per root. */
static int make_items(const int32_t *p, const int32_t *members, int32_t n_members, int32_t *atom_root, item **out,
                      int32_t *n_out) {
    item *it = NULL;
    int32_t ni = 0;
    for (int32_t a = 0; a < n_members; a++) {
        const int32_t i = members[a], root = p[i];
        int32_t k = 0;
        while (k < ni && p[it[k].units[0]] != root) k++;
        if (k == ni) {
            item *g = realloc(it, sizeof *g * (size_t)(ni + 1));
            if (!g) goto nomem;
            it = g;
            memset(&it[ni++], 0, sizeof *it);
        }
        int32_t *v = realloc(it[k].units, sizeof *v * (size_t)(it[k].n + 1));
        if (!v) goto nomem;
        it[k].units = v;
        it[k].units[it[k].n++] = i;
    }
    for (int32_t k = 0; k < ni; k++) {  /* distinct atoms */
        it[k].n_atoms = 0;
        for (int32_t j = 0; j < it[k].n; j++) {
            bool seen = false;
            for (int32_t q = 0; q < j && !seen; q++) seen = atom_root[it[k].units[q]] == atom_root[it[k].units[j]];
            it[k].n_atoms += !seen;
        }
    }
    *out = it;
    *n_out = ni;
    return ENG_OK;
nomem:
    items_free(it, ni);
    return ENG_ERR_NOMEM;
}

// ----------------------------------------------------------------------------
// The plan

static void plan_digest(const hx_unit *u, int32_t n, hx_plan *p) {
    eng_sha256_ctx c;
    eng_sha256_init(&c);
    char line[1400];
    int k = snprintf(line, sizeof line, "kvreplay plan 1\nunits %d shards %d\n", n, p->n_shards);
    eng_sha256_update(&c, line, (size_t)k);
    for (int32_t i = 0; i < n; i++) {
        const char *mb = strrchr(u[i].o.sp.model_path, '/'), *tb = strrchr(u[i].o.transcript_path, '/');
        k = snprintf(line, sizeof line, "%d\t%s\t%s\t%s\t%d\n", u[i].index, u[i].label,
                     mb ? mb + 1 : u[i].o.sp.model_path, tb ? tb + 1 : u[i].o.transcript_path, u[i].shard);
        eng_sha256_update(&c, line, (size_t)(k < (int)sizeof line ? k : (int)sizeof line - 1));
    }
    uint8_t d[32];
    eng_sha256_final(&c, d);
    eng_sha256_hex(d, p->sha256);
}

int hx_plan_make(hx_unit *u, int32_t n, int32_t n_shards, bool price, const char *calibration, hx_plan *p,
                 char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->n_units = n;
    p->n_shards = n_shards;
    p->priced = price || n_shards > 1;
    if (!(p->load_ms = calloc((size_t)n_shards, sizeof *p->load_ms))) return ENG_ERR_NOMEM;
    if (calibration) snprintf(p->price, sizeof p->price, "the reference calibrations of %s", calibration);
    else snprintf(p->price, sizeof p->price, "a nominal %.0f GFLOP/s (no --calibration)", HX_PLAN_NOMINAL_GFLOPS);
    for (int32_t i = 0; i < n; i++) {
        u[i].shard = 1;
        u[i].group = i;
        u[i].cold_ms = u[i].reuse_ms = NAN;
    }
    if (!p->priced || n == 0) {
        p->n_groups = n;
        plan_digest(u, n, p);
        return ENG_OK;
    }

    inputs in = {0};
    unit_cost *uc = calloc((size_t)n, sizeof *uc);
    int32_t *grp = malloc(sizeof *grp * (size_t)n), *atom = malloc(sizeof *atom * (size_t)n);
    int32_t *all = malloc(sizeof *all * (size_t)n);
    bool *in_set = calloc((size_t)n, sizeof *in_set);
    dir_ref *dirs = calloc((size_t)n, sizeof *dirs);
    cold_key *keys = NULL, *scratch = NULL;
    item *items = NULL, *cand = NULL;
    int32_t n_items = 0, n_cand = 0, n_keys = 0, n_dirs = 0;
    int rc = ENG_ERR_NOMEM;
    if (!uc || !grp || !atom || !all || !in_set || !dirs) goto out;
    for (int32_t i = 0; i < n; i++) {
        if ((rc = cost_unit(&in, &u[i], calibration, &uc[i], err, errlen)) != ENG_OK) goto out;
        n_keys += uc[i].n_keys;
        grp[i] = atom[i] = all[i] = i;
    }
    rc = ENG_ERR_NOMEM;
    if (!(keys = malloc(sizeof *keys * (size_t)(n_keys + 1))) || !(scratch = malloc(sizeof *scratch * (size_t)(n_keys + 1))))
        goto out;
    /* groups: a shared cold prefill or a shared cache directory; atoms: a shared directory only */
    for (int32_t i = 0, k = 0; i < n; i++) {
        memcpy(keys + k, uc[i].keys, sizeof *keys * (size_t)uc[i].n_keys);
        k += uc[i].n_keys;
        if (uc[i].dir) dirs[n_dirs++] = (dir_ref){uc[i].dir, i};
    }
    qsort(keys, (size_t)n_keys, sizeof *keys, key_cmp);
    for (int32_t i = 1; i < n_keys; i++)
        if (!XXH128_cmp(&keys[i].key, &keys[i - 1].key)) uf_union(grp, keys[i].unit, keys[i - 1].unit);
    qsort(dirs, (size_t)n_dirs, sizeof *dirs, dir_cmp);
    for (int32_t i = 1; i < n_dirs; i++)
        if (!strcmp(dirs[i].dir, dirs[i - 1].dir)) {
            uf_union(grp, dirs[i].unit, dirs[i - 1].unit);
            uf_union(atom, dirs[i].unit, dirs[i - 1].unit);
        }
    for (int32_t i = 0; i < n; i++) {
        grp[i] = uf_find(grp, i);
        atom[i] = uf_find(atom, i);
    }
    if ((rc = make_items(grp, all, n, atom, &items, &n_items)) != ENG_OK) goto out;
    p->n_groups = n_items;
    for (int32_t k = 0; k < n_items; k++) {
        for (int32_t i = 0; i < n; i++) in_set[i] = false;
        for (int32_t j = 0; j < items[k].n; j++) in_set[items[k].units[j]] = true;
        items[k].cost = set_cost(u, uc, in_set, n, scratch);
        for (int32_t j = 0; j < items[k].n; j++) u[items[k].units[j]].group = k;
    }
    double best = lpt(u, uc, n, items, n_items, n_shards, p->load_ms, in_set, scratch);
    /* Split a group into its atoms while that shortens the longest shard by HX_PLAN_MIN_GAIN or more. */
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t k = 0; k < n_items && !changed; k++) {  /* items are sorted costliest first */
            if (items[k].n_atoms < 2) continue;
            item *parts = NULL;
            int32_t n_parts = 0;
            if ((rc = make_items(atom, items[k].units, items[k].n, atom, &parts, &n_parts)) != ENG_OK) goto out;
            n_cand = n_items - 1 + n_parts;
            if (!(cand = calloc((size_t)n_cand, sizeof *cand))) {
                items_free(parts, n_parts);
                rc = ENG_ERR_NOMEM;
                goto out;
            }
            int32_t c = 0;
            for (int32_t j = 0; j < n_items; j++)
                if (j != k) cand[c++] = items[j];
            for (int32_t j = 0; j < n_parts; j++) {
                for (int32_t i = 0; i < n; i++) in_set[i] = false;
                for (int32_t q = 0; q < parts[j].n; q++) in_set[parts[j].units[q]] = true;
                parts[j].cost = set_cost(u, uc, in_set, n, scratch);
                cand[c++] = parts[j];
            }
            double *load = calloc((size_t)n_shards, sizeof *load);
            if (!load) {
                items_free(parts, n_parts);
                rc = ENG_ERR_NOMEM;
                goto out;
            }
            double mk = lpt(u, uc, n, cand, n_cand, n_shards, load, in_set, scratch);
            if (mk < best * (1 - HX_PLAN_MIN_GAIN)) {
                free(parts);  /* their unit arrays now belong to cand */
                free(items[k].units);  /* replaced by its parts */
                free(items);
                items = cand;
                n_items = n_cand;
                cand = NULL;
                best = mk;
                memcpy(p->load_ms, load, sizeof *load * (size_t)n_shards);
                p->n_split++;
                changed = true;
            } else {
                items_free(parts, n_parts);  /* keep items (cand shares their arrays) */
                free(cand);
                cand = NULL;
                best = lpt(u, uc, n, items, n_items, n_shards, p->load_ms, in_set, scratch);
            }
            free(load);
        }
    }
    p->total_ms = 0;
    for (int32_t k = 0; k < n_shards; k++) p->total_ms += p->load_ms[k];
    plan_digest(u, n, p);
    rc = ENG_OK;
out:
    items_free(items, n_items);
    for (int32_t i = 0; uc && i < n; i++) free(uc[i].keys);
    free(uc);
    free(grp);
    free(atom);
    free(all);
    free(in_set);
    free(dirs);
    free(keys);
    free(scratch);
    inputs_free(&in);
    return rc;
}

void hx_plan_print(FILE *f, const hx_unit *u, int32_t n, const hx_plan *p, const char *experiment, const char *scale) {
    fprintf(f, "# experiment %s, %s scale: %d units, %d shard%s; plan %.12s\n", experiment, scale, n, p->n_shards,
            p->n_shards == 1 ? "" : "s", p->sha256);
    if (!p->priced) return;
    const double mean = p->n_shards ? p->total_ms / p->n_shards : 0;
    fprintf(f, "# modeled cost: FLOPs priced at %s; %d groups (units that share cold results or a cache\n"
            "# directory run in one shard), %d split to shorten the longest shard\n", p->price, p->n_groups,
            p->n_split);
    fprintf(f, "# %7s %6s %14s %7s\n", "shard", "units", "modeled (s)", "x mean");
    for (int32_t k = 0; k < p->n_shards; k++) {
        int32_t nu = 0, last = -1;
        for (int32_t i = 0; i < n; i++)
            if (u[i].shard == k + 1) {
                nu++;
                last = i;
            }
        const double x = mean > 0 ? p->load_ms[k] / mean : 0;
        fprintf(f, "# %4d/%-2d %6d %14.1f %7.2f%s\n", k + 1, p->n_shards, nu, p->load_ms[k] / 1e3, x,
                x > 2 && nu == 1 ? "  (one unit, which cannot be split)"
                : x > 2 && last >= 0 ? "  (one group, which cannot be split further)" : "");
    }
    fprintf(f, "# total %.1f s modeled, %.1f s per shard on average\n", p->total_ms / 1e3, mean / 1e3);
    fprintf(f, "# %4s %6s %6s %11s %11s  %s\n", "unit", "shard", "group", "cold (s)", "reused (s)", "variant");
    for (int32_t i = 0; i < n; i++)
        fprintf(f, "# %4d %3d/%-2d %6d %11.1f %11.1f  %s\n", u[i].index, u[i].shard, p->n_shards, u[i].group,
                u[i].cold_ms / 1e3, u[i].reuse_ms / 1e3, u[i].label);
}

void hx_plan_free(hx_plan *p) {
    if (!p) return;
    free(p->load_ms);
    p->load_ms = NULL;
}

int hx_shard_parse(const char *s, int32_t *k, int32_t *n) {
    char *e1 = NULL, *e2 = NULL;
    long a = strtol(s, &e1, 10);
    if (e1 == s || *e1 != '/') return ENG_ERR_ARG;
    long b = strtol(e1 + 1, &e2, 10);
    if (e2 == e1 + 1 || *e2 || a < 1 || b < 1 || a > b || b > 4096) return ENG_ERR_ARG;
    *k = (int32_t)a;
    *n = (int32_t)b;
    return ENG_OK;
}
