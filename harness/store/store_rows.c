/*
 * harness/store/store_rows.c: a request's row and its steps' rows, written
 * in one transaction (see store.h): all of them or none.
 */
#include "store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "store_int.h"

// ----------------------------------------------------------------------------
// Requests and steps, one transaction each

void hx_request_row_init(hx_request_row *r) {
    ENG_ASSERT(r != NULL);
    memset(r, 0, sizeof *r);
    r->first_diff_index = -1;
    r->fork_step = -1;
    r->kl = NAN;
    r->ttft_cold_ms = r->ttft_reuse_ms = NAN;
    r->ttft_cold_min_ms = r->ttft_cold_max_ms = r->ttft_reuse_min_ms = r->ttft_reuse_max_ms = NAN;
    r->model_cold_ms = r->model_reuse_ms = NAN;
    r->flops_cold = r->flops_reuse = NAN;
    r->sim = r->f_keep = NAN;
    r->restore_ms = r->store_ms = r->anchor_ms = NAN;
    r->bytes_restored = r->slot = r->lcp = r->miss_pos = r->miss_byte = -1;
    r->n_checkpoints = r->ckpt_bytes = r->n_stored = r->bytes_stored = -1;
    r->stable_end = r->anchor_pos = -1;
    r->state_equal = -1;
    r->cache_bytes = r->cache_entries = -1;
    r->verified = 1;
    r->reuse_expected = r->reuse_reported = r->n_prompt_local = r->json_equal = r->n_probs = r->http_status = -1;
    r->batch_k = r->batch_equal = r->batch_first_diff = r->batch_ulp_first = r->batch_max_ulp = -1;
}

void hx_step_row_init(hx_step_row *r) {
    ENG_ASSERT(r != NULL);
    memset(r, 0, sizeof *r);
    r->first_diff_index = -1;
    r->kl = NAN;
}

void hx_request_row_set_cmp(hx_request_row *r, const hx_cmp *c) {
    ENG_ASSERT(r != NULL && c != NULL);
    r->logits_equal = c->equal;
    r->first_diff_index = c->equal ? -1 : c->first_diff;
    r->a_first = c->a_first;
    r->b_first = c->b_first;
    r->ulp_first = c->ulp_first;
    r->max_abs_diff = c->max_abs;
    r->max_ulp = c->max_ulp;
    r->kl = c->kl;
    r->top1_equal = c->top1_equal;
}

void hx_step_row_set_cmp(hx_step_row *r, const hx_cmp *c) {
    ENG_ASSERT(r != NULL && c != NULL);
    r->logits_equal = c->equal;
    r->first_diff_index = c->equal ? -1 : c->first_diff;
    r->a_first = c->a_first;
    r->b_first = c->b_first;
    r->ulp_first = c->ulp_first;
    r->max_abs_diff = c->max_abs;
    r->max_ulp = c->max_ulp;
    r->kl = c->kl;
}

static void bind_request(sqlite3_stmt *st, int64_t run_id, const hx_request_row *r) {
    bool diff = r->first_diff_index >= 0;
    hx_bind_int(st, "run_id", run_id);
    hx_bind_int(st, "req_index", r->req_index);
    hx_bind_text(st, "transcript", r->transcript);
    hx_bind_text(st, "session", r->session);
    hx_bind_int(st, "turn", r->turn);
    hx_bind_int(st, "n_prompt", r->n_prompt);
    hx_bind_int(st, "n_reused", r->n_reused);
    hx_bind_int(st, "n_prefilled", r->n_prefilled);
    hx_bind_real(st, "ttft_cold_ms", r->ttft_cold_ms);
    hx_bind_real(st, "ttft_reuse_ms", r->ttft_reuse_ms);
    hx_bind_real(st, "ttft_cold_min_ms", r->ttft_cold_min_ms);
    hx_bind_real(st, "ttft_cold_max_ms", r->ttft_cold_max_ms);
    hx_bind_real(st, "ttft_reuse_min_ms", r->ttft_reuse_min_ms);
    hx_bind_real(st, "ttft_reuse_max_ms", r->ttft_reuse_max_ms);
    hx_bind_real(st, "model_cold_ms", r->model_cold_ms);
    hx_bind_real(st, "model_reuse_ms", r->model_reuse_ms);
    hx_bind_int(st, "logits_equal", r->logits_equal);
    hx_bind_int_opt(st, "first_diff_index", r->first_diff_index);
    hx_bind_first_diff(st, diff, r->a_first, r->b_first, r->ulp_first);
    hx_bind_real(st, "max_abs_diff", r->max_abs_diff);
    hx_bind_u64(st, "max_ulp", r->max_ulp);
    hx_bind_real(st, "kl", r->kl);
    hx_bind_int(st, "top1_equal", r->top1_equal);
    hx_bind_int_opt(st, "fork_step", r->fork_step);
    hx_bind_int(st, "decode_equal", r->decode_equal);
    hx_bind_int_opt(st, "state_equal", r->state_equal);
    char hc[17], hr[17];
    snprintf(hc, sizeof hc, "%016llx", (unsigned long long)r->state_hash_cold);
    snprintf(hr, sizeof hr, "%016llx", (unsigned long long)r->state_hash_reuse);
    hx_bind_text(st, "state_hash_cold", r->state_equal >= 0 ? hc : NULL);
    hx_bind_text(st, "state_hash_reuse", r->state_equal >= 0 ? hr : NULL);
    hx_bind_int(st, "n_decode", r->n_decode);
    hx_bind_real(st, "flops_cold", r->flops_cold);
    hx_bind_real(st, "flops_reuse", r->flops_reuse);
    hx_bind_int_opt(st, "bytes_restored", r->bytes_restored);
    hx_bind_real(st, "sim", r->sim);
    hx_bind_real(st, "f_keep", r->f_keep);
    hx_bind_int_opt(st, "slot", r->slot);
    hx_bind_int_opt(st, "lcp", r->lcp);
    hx_bind_int_opt(st, "miss_pos", r->miss_pos);
    hx_bind_int_opt(st, "miss_byte", r->miss_byte);
    hx_bind_text(st, "miss_text", r->miss_text);
    hx_bind_text(st, "miss_where", r->miss_where);
    hx_bind_int_opt(st, "n_checkpoints", r->n_checkpoints);
    hx_bind_int_opt(st, "ckpt_bytes", r->ckpt_bytes);
    hx_bind_int_opt(st, "n_stored", r->n_stored);
    hx_bind_int_opt(st, "bytes_stored", r->bytes_stored);
    hx_bind_int_opt(st, "stable_end", r->stable_end);
    hx_bind_int_opt(st, "anchor_pos", r->anchor_pos);
    hx_bind_int(st, "cold_shared", r->cold_shared);
    hx_bind_real(st, "restore_ms", r->restore_ms);
    hx_bind_real(st, "store_ms", r->store_ms);
    hx_bind_real(st, "anchor_ms", r->anchor_ms);
    hx_bind_text(st, "note", r->note);
    hx_bind_text(st, "extra", r->extra);
    hx_bind_int_opt(st, "cache_bytes", r->cache_bytes);
    hx_bind_int_opt(st, "cache_entries", r->cache_entries);
    hx_bind_int(st, "verified", r->verified ? 1 : 0);
    hx_bind_int_opt(st, "reuse_expected", r->reuse_expected);
    hx_bind_int_opt(st, "reuse_reported", r->reuse_reported);
    hx_bind_text(st, "reuse_basis", r->reuse_basis);
    hx_bind_int_opt(st, "n_prompt_local", r->n_prompt_local);
    hx_bind_text(st, "prompt_diff", r->prompt_diff);
    hx_bind_int_opt(st, "json_equal", r->json_equal);
    hx_bind_int_opt(st, "n_probs", r->n_probs);
    hx_bind_text(st, "error", r->error);
    hx_bind_text(st, "error_message", r->error_message);
    hx_bind_int_opt(st, "http_status", r->http_status);
    hx_bind_int_opt(st, "batch_k", r->batch_k);
    hx_bind_int_opt(st, "batch_equal", r->batch_equal);
    hx_bind_int_opt(st, "batch_first_diff", r->batch_first_diff);
    hx_bind_int_opt(st, "batch_ulp_first", r->batch_ulp_first);
    hx_bind_int_opt(st, "batch_max_ulp", r->batch_max_ulp);
}

static void bind_step(sqlite3_stmt *st, int64_t run_id, const char *session, int32_t turn,
                      const hx_step_row *r) {
    bool diff = r->first_diff_index >= 0;
    hx_bind_int(st, "run_id", run_id);
    hx_bind_text(st, "session", session);
    hx_bind_int(st, "turn", turn);
    hx_bind_int(st, "step", r->step);
    hx_bind_int(st, "token_cold", r->token_cold);
    hx_bind_int(st, "token_reuse", r->token_reuse);
    hx_bind_int(st, "logits_equal", r->logits_equal);
    hx_bind_real(st, "max_abs_diff", r->max_abs_diff);
    hx_bind_u64(st, "max_ulp", r->max_ulp);
    hx_bind_int_opt(st, "first_diff_index", r->first_diff_index);
    hx_bind_first_diff(st, diff, r->a_first, r->b_first, r->ulp_first);
    hx_bind_real(st, "kl", r->kl);
}

static int check_request(const hx_store *s, const hx_request_row *r, const hx_step_row *steps,
                         int32_t n_steps, char *err, size_t errlen) {
    const char *bad = NULL;
    if (!r->session) bad = "session is NULL";
    else if (r->req_index < 0) bad = "req_index is negative";
    else if (r->turn < 0) bad = "turn is negative";
    else if (r->n_prompt < 0 || r->n_reused < 0 || r->n_prefilled < 0) bad = "a token count is negative";
    else if (r->n_decode < 0) bad = "n_decode is negative";
    else if (n_steps < 0 || (n_steps > 0 && !steps)) bad = "steps: bad array";
    if (!bad) return ENG_OK;
    eng_errf(err, errlen, "%s: requests: session %s turn %d: %s", s->path,
             r->session ? r->session : "(null)", (int)r->turn, bad);
    return ENG_ERR_ARG;
}

int hx_store_put_request(hx_store *s, int64_t run_id, const hx_request_row *row,
                         const hx_step_row *steps, int32_t n_steps, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && row != NULL);
    int status = check_request(s, row, steps, n_steps, err, errlen);
    if (status != ENG_OK) return status;
    sqlite3_stmt *begin = hx_store_stmt(s, ST_BEGIN, &status, err, errlen);
    sqlite3_stmt *commit = begin ? hx_store_stmt(s, ST_COMMIT, &status, err, errlen) : NULL;
    sqlite3_stmt *ins_req = commit ? hx_store_stmt(s, ST_INSERT_REQUEST, &status, err, errlen) : NULL;
    sqlite3_stmt *ins_step = ins_req ? hx_store_stmt(s, ST_INSERT_STEP, &status, err, errlen) : NULL;
    sqlite3_stmt *rollback = ins_step ? hx_store_stmt(s, ST_ROLLBACK, &status, err, errlen) : NULL;
    if (!rollback) return status;

    const char *sess = row->session;
    int rc = hx_store_step_done(begin);
    sqlite3_reset(begin);
    if (rc != SQLITE_OK)
        return hx_store_fail(s, rc, err, errlen, "requests: session %s turn %d: BEGIN IMMEDIATE", sess,
                        (int)row->turn);

    bind_request(ins_req, run_id, row);
    rc = hx_store_step_done(ins_req);
    if (rc != SQLITE_OK) {
        status = hx_store_fail(s, rc, err, errlen, "requests: run %lld session %s turn %d: insert",
                          (long long)run_id, sess, (int)row->turn);
        goto out;
    }
    for (int32_t k = 0; k < n_steps; k++) {
        sqlite3_reset(ins_step);
        bind_step(ins_step, run_id, sess, row->turn, &steps[k]);
        rc = hx_store_step_done(ins_step);
        if (rc != SQLITE_OK) {
            status = hx_store_fail(s, rc, err, errlen,
                              "steps: run %lld session %s turn %d: step %d (entry %d): insert",
                              (long long)run_id, sess, (int)row->turn, (int)steps[k].step,
                              (int)k);
            goto out;
        }
    }
    rc = hx_store_step_done(commit);
    sqlite3_reset(commit);
    if (rc != SQLITE_OK)
        status = hx_store_fail(s, rc, err, errlen, "requests: session %s turn %d: COMMIT", sess,
                          (int)row->turn);
out:
    sqlite3_reset(ins_req);
    sqlite3_clear_bindings(ins_req);
    sqlite3_reset(ins_step);
    sqlite3_clear_bindings(ins_step);
    if (status != ENG_OK && !sqlite3_get_autocommit(s->db)) {
        hx_store_step_done(rollback);
        sqlite3_reset(rollback);
    }
    return status;
}
