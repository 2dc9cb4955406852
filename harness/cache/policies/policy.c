/*
 * harness/policies/policy.c: policy registry, quirk names, and the reuse
 * rule every policy shares (see policy.h).
 */
#include "policy.h"

#include <stdio.h>
#include <string.h>

#include "status.h"

static const struct {
    const char *name;
    const char *policy;
    unsigned    bit;
} quirk_table[] = {
    {"full-reprocess",     "slot-lcp",    HX_QUIRK_FULL_REPROCESS},
    {"swa-threshold",      "slot-lcp",    HX_QUIRK_SWA_THRESHOLD},
    {"offgrid-checkpoint", "slot-lcp",    HX_QUIRK_OFFGRID_CHECKPOINT},
    {"anchor-cold-only",   "disk-anchor", HX_QUIRK_ANCHOR_COLD_ONLY},
};
#define N_QUIRKS (sizeof quirk_table / sizeof quirk_table[0])

int hx_quirks_parse(const char *policy, const char *list, unsigned *out, char *err, size_t errlen) {
    *out = 0;
    if (!list || !*list) return ENG_OK;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < N_QUIRKS; i++) if (!strcmp(tok, quirk_table[i].name)) break;
        if (i == N_QUIRKS) {
            eng_errf(err, errlen, "--quirk: unknown quirk '%s' (known: full-reprocess, swa-threshold, "
                     "offgrid-checkpoint, anchor-cold-only)", tok);
            return ENG_ERR_ARG;
        }
        if (strcmp(policy, quirk_table[i].policy) != 0) {
            eng_errf(err, errlen, "--quirk: '%s' is a quirk of policy %s, not %s", tok,
                     quirk_table[i].policy, policy);
            return ENG_ERR_ARG;
        }
        *out |= quirk_table[i].bit;
    }
    return ENG_OK;
}

const char *hx_quirks_str(unsigned q) {
    static char buf[256];
    buf[0] = '\0';
    for (size_t i = 0; i < N_QUIRKS; i++) {
        if (!(q & quirk_table[i].bit)) continue;
        if (buf[0]) strcat(buf, ",");
        strcat(buf, quirk_table[i].name);
    }
    return buf;
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

static const hx_policy_ops *const all_policies[] = {
    &hx_policy_cold, &hx_policy_slot_lcp, &hx_policy_disk_anchor,
};

const char *hx_policy_names(void) { return "cold, slot-lcp, disk-anchor"; }

int hx_policy_create(const char *name, const hx_policy_config *cfg, hx_policy **out, char *err, size_t errlen) {
    *out = NULL;
    const hx_policy_ops *ops = NULL;
    for (size_t i = 0; i < sizeof all_policies / sizeof all_policies[0]; i++)
        if (!strcmp(all_policies[i]->name, name)) ops = all_policies[i];
    if (!ops) {
        eng_errf(err, errlen, "--policy: unknown policy '%s' (known: %s)", name, hx_policy_names());
        return ENG_ERR_ARG;
    }
    hx_policy *p = calloc(1, sizeof *p);
    if (!p) return ENG_ERR_NOMEM;
    p->ops = ops;
    p->cfg = *cfg;
    int rc = ops->create(&p->cfg, &p->state, err, errlen);
    if (rc != ENG_OK) {
        if (p->state) ops->destroy(p->state);
        free(p);
        return rc;
    }
    *out = p;
    return ENG_OK;
}

void hx_policy_destroy(hx_policy *p) {
    if (!p) return;
    if (p->ops && p->state) p->ops->destroy(p->state);
    free(p);
}
