/*
 * harness/cache/policies/policy.c: the policy registry, the quirk and option
 * lookups over it, and the reuse rule every policy shares (see policy.h).
 */
#include "policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "status.h"

// ----------------------------------------------------------------------------
// The registry: one line per policy. X(id) names hx_policy_<id>, the
// hx_policy_ops defined in cache/policies/<id>.c; the order is --help's.

#define HX_POLICY_LIST(X) \
    X(cold)               \
    X(slot_lcp)           \
    X(disk_anchor)        \
    X(block_hash)         \
    X(radix)              \
    /* one line per policy, above this one */

#define DECLARE(id) extern const hx_policy_ops hx_policy_##id;
#define ENTRY(id) &hx_policy_##id,
HX_POLICY_LIST(DECLARE)
const hx_policy_ops *const hx_policies[] = {HX_POLICY_LIST(ENTRY) NULL};

static const hx_policy_ops *find_policy(const char *name) {
    for (size_t i = 0; hx_policies[i]; i++)
        if (!strcmp(hx_policies[i]->name, name)) return hx_policies[i];
    return NULL;
}

const char *hx_policy_names(void) {
    static char buf[256];
    if (buf[0]) return buf;
    for (size_t i = 0, off = 0; hx_policies[i] && off < sizeof buf; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", i ? ", " : "", hx_policies[i]->name);
    return buf;
}

// ----------------------------------------------------------------------------
// Quirks

static void all_quirk_names(char *out, size_t cap) {
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; hx_policies[i]; i++)
        for (const hx_quirk *q = hx_policies[i]->quirks; q && q->name && off < cap; q++)
            off += (size_t)snprintf(out + off, cap - off, "%s%s", off ? ", " : "", q->name);
}

int hx_quirks_parse(const char *policy, const char *list, unsigned *out, char *err, size_t errlen) {
    *out = 0;
    if (!list || !*list) return ENG_OK;
    const hx_policy_ops *ops = find_policy(policy);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int bit = -1;
        for (int k = 0; ops && ops->quirks && ops->quirks[k].name; k++)
            if (!strcmp(tok, ops->quirks[k].name)) bit = k;
        if (bit >= 0) {
            *out |= 1u << bit;
            continue;
        }
        for (size_t i = 0; hx_policies[i]; i++)
            for (const hx_quirk *q = hx_policies[i]->quirks; q && q->name; q++)
                if (!strcmp(tok, q->name)) {
                    eng_errf(err, errlen, "--quirk: '%s' is a quirk of policy %s, not %s", tok,
                             hx_policies[i]->name, policy);
                    return ENG_ERR_ARG;
                }
        char known[512];
        all_quirk_names(known, sizeof known);
        eng_errf(err, errlen, "--quirk: unknown quirk '%s' (known: %s)", tok, known);
        return ENG_ERR_ARG;
    }
    return ENG_OK;
}

const char *hx_quirks_str(const char *policy, unsigned q) {
    static char buf[256];
    buf[0] = '\0';
    const hx_policy_ops *ops = find_policy(policy);
    for (int k = 0; ops && ops->quirks && ops->quirks[k].name; k++) {
        if (!(q & (1u << k))) continue;
        if (buf[0]) strcat(buf, ",");
        strcat(buf, ops->quirks[k].name);
    }
    return buf;
}

// ----------------------------------------------------------------------------
// Options

/* The entry of option name of the first registered policy that declares
 * it (and that policy, when ops is not NULL), or NULL. */
static const hx_option *find_option(const char *name, const hx_policy_ops **ops) {
    for (size_t i = 0; hx_policies[i]; i++) {
        const hx_option *o = hx_option_find(hx_policies[i]->options, name);
        if (o && ops) *ops = hx_policies[i];
        if (o) return o;
    }
    return NULL;
}

static hx_policy_arg *arg_slot(hx_policy_args *args, const char *name) {
    for (int32_t k = 0; k < args->n; k++)
        if (!strcmp(args->a[k].name, name)) return &args->a[k];
    if (args->n == HX_POLICY_ARGS_MAX) return NULL;
    return &args->a[args->n++];
}

int hx_policy_args_take(hx_policy_args *args, int argc, char **argv, int *i, char *err, size_t errlen) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(argv[*i], "="), argv[*i]);
    const hx_policy_ops *ops = NULL;
    const hx_option *o = find_option(name, &ops);
    const char *v = NULL;
    int rc = ENG_OK;
    if (!o) return 0;
    if (o->type == HX_OPT_FLAG ? strcmp(argv[*i], name) != 0 : !(v = hx_option_value(argc, argv, i, name, &rc, err, errlen)))
        return rc;
    /* the value is checked now, parsed into a scratch copy of the options */
    void *scratch = malloc(ops->opts_size);
    if (!scratch) {
        eng_errf(err, errlen, "%s: out of memory", o->name);
        return ENG_ERR_NOMEM;
    }
    memcpy(scratch, ops->defaults, ops->opts_size);
    rc = hx_option_set(o, v, (char *)scratch + o->offset, err, errlen);
    free(scratch);
    if (rc) return rc;
    hx_policy_arg *a = arg_slot(args, o->name);
    if (!a) {
        eng_errf(err, errlen, "%s: more than %d policy options", o->name, HX_POLICY_ARGS_MAX);
        return ENG_ERR_ARG;
    }
    a->name = o->name;
    a->text = v ? v : "";
    a->num = 0;
    return 1;
}

/* Writes arg's value into field, as o declares it (checked when it was set). */
static void apply_arg(const hx_option *o, const hx_policy_arg *a, void *field) {
    if (a->text) {
        int rc = hx_option_set(o, o->type == HX_OPT_FLAG ? NULL : a->text, field, NULL, 0);
        ENG_ASSERT(rc == ENG_OK);  /* hx_policy_args_take checked it */
        return;
    }
    switch (o->type) {
    case HX_OPT_FLAG:   *(bool *)field = a->num != 0; break;
    case HX_OPT_INT:    *(int32_t *)field = (int32_t)a->num; break;
    case HX_OPT_INT64:
    case HX_OPT_MIB:    *(int64_t *)field = a->num; break;
    case HX_OPT_DOUBLE: *(double *)field = (double)a->num; break;
    default:            ENG_ASSERT(!"refused by set_arg");
    }
}

bool hx_policy_args_read(const hx_policy_args *args, const char *name, void *field) {
    for (int32_t k = 0; args && k < args->n; k++)
        if (!strcmp(args->a[k].name, name)) {
            apply_arg(find_option(name, NULL), &args->a[k], field);
            return true;
        }
    return false;
}

static int set_arg(hx_policy_args *args, const char *name, const char *text, int64_t num) {
    const hx_option *o = find_option(name, NULL);
    if (o && !text && o->type != HX_OPT_FLAG && o->type != HX_OPT_INT && o->type != HX_OPT_INT64 &&
        o->type != HX_OPT_MIB && o->type != HX_OPT_DOUBLE)
        return ENG_ERR_ARG;  /* not an option a number can set */
    hx_policy_arg *a = o ? arg_slot(args, o->name) : NULL;
    if (!a) return ENG_ERR_ARG;
    a->name = o->name;
    a->text = text;
    a->num = num;
    return ENG_OK;
}

int hx_policy_args_set(hx_policy_args *args, const char *name, const char *text) {
    return set_arg(args, name, text ? text : "", 0);
}

int hx_policy_args_set_num(hx_policy_args *args, const char *name, int64_t num) {
    return set_arg(args, name, NULL, num);
}

void hx_policy_quirks_help(FILE *f) {
    fprintf(f, "  %-25s switch on a reported bug of the policy (repeatable):\n", "--quirk Q");
    for (size_t i = 0; hx_policies[i]; i++)
        for (const hx_quirk *q = hx_policies[i]->quirks; q && q->name; q++)
            fprintf(f, "%28s%s (%s; %s)\n%30s%s\n", "", q->name, hx_policies[i]->name, q->source, "", q->help);
}

void hx_policy_help(FILE *f) {
    for (size_t i = 0; hx_policies[i]; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s: ", hx_policies[i]->name);
        hx_options_help(hx_policies[i]->options, prefix, f);
    }
}

// ----------------------------------------------------------------------------
// The reuse rule every policy shares

int hx_policy_acquire(hx_policy *p, const int32_t *tokens, int32_t n, int32_t stable_end, const hx_acquire_hint *h,
                      hx_acquire *out) {
    if (h && (h->no_reuse || h->id_slot >= 0)) {
        if (!p->ops->hint) return ENG_ERR_UNSUPPORTED;
        p->ops->hint(p->state, h);
    }
    return p->ops->acquire(p->state, tokens, n, stable_end, out);
}

int32_t hx_policy_n_slots(const hx_policy *p) { return p->ops->n_slots ? p->ops->n_slots(p->state) : 0; }

int64_t hx_policy_slot_tokens(const hx_policy *p, int32_t slot) {
    if (!p->ops->slot_tokens || slot < 0 || slot >= hx_policy_n_slots(p)) return -1;
    return p->ops->slot_tokens(p->state, slot);
}

int64_t hx_policy_erase(hx_policy *p, int32_t slot) {
    if (!p->ops->erase) return ENG_ERR_UNSUPPORTED;
    if (slot < 0 || slot >= hx_policy_n_slots(p)) return ENG_ERR_RANGE;
    return p->ops->erase(p->state, slot);
}

int32_t hx_lcp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

int32_t hx_policy_reuse_len(const hx_policy_config *cfg, int32_t lcp, int32_t n_cached_prompt, int32_t n) {
    int32_t r = lcp;
    if (cfg->cap_prompt && r > n_cached_prompt) r = n_cached_prompt;
    if (r > n - 1) r = n - 1;  /* the last prompt token is always computed */
    if (r < 0) r = 0;
    if (cfg->pp.align == ENG_ALIGN_CHUNK) r = (r / cfg->pp.chunk) * cfg->pp.chunk;
    return r;
}

// ----------------------------------------------------------------------------
// Creation

int hx_policy_create(const char *name, const hx_policy_config *cfg, const hx_policy_args *args, hx_policy **out,
                     char *err, size_t errlen) {
    *out = NULL;
    const hx_policy_ops *ops = find_policy(name);
    if (!ops) {
        eng_errf(err, errlen, "--policy: unknown policy '%s' (known: %s)", name, hx_policy_names());
        return ENG_ERR_ARG;
    }
    hx_policy *p = calloc(1, sizeof *p);
    if (!p) return ENG_ERR_NOMEM;
    p->ops = ops;
    p->cfg = *cfg;
    if (ops->opts_size) {
        if (!(p->opts = malloc(ops->opts_size))) { free(p); return ENG_ERR_NOMEM; }
        memcpy(p->opts, ops->defaults, ops->opts_size);
        for (int32_t k = 0; args && k < args->n; k++) {
            const hx_option *o = hx_option_find(ops->options, args->a[k].name);
            if (o) apply_arg(o, &args->a[k], (char *)p->opts + o->offset);
        }
    }
    p->cfg.opts = p->opts;
    if (p->cfg.n_parallel < 1) p->cfg.n_parallel = 1;
    int rc = ops->create(&p->cfg, &p->state, err, errlen);
    if (rc != ENG_OK) {
        if (p->state) ops->destroy(p->state);
        free(p->opts);
        free(p);
        return rc;
    }
    *out = p;
    return ENG_OK;
}

void hx_policy_record(const hx_policy *p, struct hx_run_meta *meta) {
    if (p && p->ops->record) p->ops->record(p->opts, meta);
    if (p && p->ops->record_state) p->ops->record_state(p->state, meta);
}

void hx_policy_destroy(hx_policy *p) {
    if (!p) return;
    if (p->ops && p->state) p->ops->destroy(p->state);
    free(p->opts);
    free(p);
}

// ----------------------------------------------------------------------------
// Token-only mode

int32_t hx_sim_lcp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[HX_SIM_WORDS * i] == b[HX_SIM_WORDS * i] && a[HX_SIM_WORDS * i + 1] == b[HX_SIM_WORDS * i + 1]) i++;
    return i;
}

int hx_sim_policy_create(const char *name, const hx_sim_config *cfg, const hx_policy_args *args,
                         hx_sim_policy **out, char *err, size_t errlen) {
    *out = NULL;
    const hx_policy_ops *ops = find_policy(name);
    if (!ops || !ops->sim) {
        char known[256] = "";
        for (size_t i = 0, off = 0; hx_policies[i] && off < sizeof known; i++)
            if (hx_policies[i]->sim)
                off += (size_t)snprintf(known + off, sizeof known - off, "%s%s", off ? ", " : "", hx_policies[i]->name);
        eng_errf(err, errlen, "--policy: %s '%s' (policies with a token-only mode: %s)",
                 ops ? "no token-only mode for policy" : "unknown policy", name, known);
        return ENG_ERR_ARG;
    }
    if (cfg->block_tokens < 1 || cfg->capacity_tokens < 0 || cfg->block_size < 0 ||
        (cfg->block_size && cfg->block_size % cfg->block_tokens)) {
        eng_errf(err, errlen, "--block-size: %lld tokens is not a whole number of the trace's %d-token blocks",
                 (long long)cfg->block_size, cfg->block_tokens);
        return ENG_ERR_ARG;
    }
    hx_sim_policy *p = calloc(1, sizeof *p);
    if (!p) return ENG_ERR_NOMEM;
    p->ops = ops;
    p->sim = ops->sim;
    p->cfg = *cfg;
    if (ops->opts_size) {
        if (!(p->opts = malloc(ops->opts_size))) { free(p); return ENG_ERR_NOMEM; }
        memcpy(p->opts, ops->defaults, ops->opts_size);
        for (int32_t k = 0; args && k < args->n; k++) {
            const hx_option *o = hx_option_find(ops->options, args->a[k].name);
            if (o) apply_arg(o, &args->a[k], (char *)p->opts + o->offset);
        }
    }
    p->cfg.opts = p->opts;
    int rc = p->sim->create(&p->cfg, &p->state, err, errlen);
    if (rc != ENG_OK) {
        hx_sim_policy_destroy(p);
        return rc;
    }
    *out = p;
    return ENG_OK;
}

void hx_sim_policy_destroy(hx_sim_policy *p) {
    if (!p) return;
    if (p->state) p->sim->destroy(p->state);
    free(p->opts);
    free(p);
}
