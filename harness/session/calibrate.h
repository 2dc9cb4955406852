/*
 * harness/replay/calibrate.h: the calibration that prices a run's modeled
 * TTFT (docs/sqlite.md, "Modeled TTFT").
 *
 * A measured TTFT is one wall-clock figure on a shared machine; the modeled
 * TTFT is its deterministic companion: the request's FLOPs (the engine's
 * cost model) and the bytes its policy restored, priced at
 *   model_cold_ms  = flops_cold / gflops
 *   model_reuse_ms = flops_reuse / gflops + bytes_restored / restore_gbs
 * Two figures set the price:
 *   gflops       the prefill GFLOP/s of this model under this run's numerics
 *                (kernel, precision, threads) and chunk length (C under align
 *                chunk, ubatch under align none): cold prefills of seeded
 *                tokens, the fastest of the timed ones (on a shared machine
 *                the one least disturbed by other jobs);
 *   restore_gbs  GB/s of eng_seq_deserialize of that prefill's state (what a
 *                policy's restore does: a snapshot, a checkpoint file), the
 *                fastest of up to 5.
 * Every run measures both at its start (runs.calib_*). Priced at the run's
 * own measurement the modeled TTFT still moves with the machine's load, so a
 * run can instead be priced at a reference (--calibration FILE): a JSON file
 * of measured calibrations keyed by configuration; the first run that needs
 * a missing entry measures it and adds it, every later run reuses it, and
 * two runs priced from the same file give identical modeled TTFTs (runs.price_*
 * and price_source record which figures priced a run).
 *
 * Reference file (written atomically; docs/sqlite.md):
 *   {"format": "kvreplay-calibration", "version": 1, "entries": [
 *     {"model_sha256": HEX, "model_name": S, "kernel": "blas"|"ref",
 *      "precision": "fp32"|"bf16", "threads": T, "align": "chunk"|"none",
 *      "chunk": C, "ubatch": U, "gflops": G, "restore_gbs": B,
 *      "tokens": N, "measured_at": ISO-8601, "cpu": S, "git_rev": S}, ...]}
 * An entry matches on model_sha256, kernel, precision, threads and the chunk
 * length of a prefill from position 0 (chunk under align chunk, ubatch under
 * align none: the same chunks); the other fields are provenance.
 */
#ifndef HX_CALIBRATE_H
#define HX_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct hx_calibration {
    double  gflops;       /* prefill GFLOP/s (cost-model FLOPs over wall time) */
    double  restore_gbs;  /* state restore GB/s */
    int32_t n_tokens;     /* tokens of the calibration prefill */
} hx_calibration;

/* Measures m under pp (its align, chunk and ubatch; on_chunk and all_logits
 * ignored) with sequences of at most n_ctx positions: cold prefills of up to
 * 1024 seeded tokens (4 chunks, at least 256), a warm-up then up to 5 timed
 * (fewer once 1 s has passed), and deserialisations of the resulting state:
 * the fastest timings.
 * ENG_OK, or ENG_ERR_NOMEM / the engine's error. */
int hx_calibrate_measure(const eng_model *m, const eng_prefill_params *pp, int32_t n_ctx, hx_calibration *out);

/* The reference calibration of m under pp from the file at path: the
 * matching entry, or, when there is none (or no file), `measured` (when
 * NULL: measured now, as hx_calibrate_measure with n_ctx 1024), which is
 * then added to the file (created if absent; *added true). Adding holds an
 * exclusive lock on PATH.lock from reading the file to renaming the new one
 * over it, and looks for the entry again under it: processes that start
 * together (an experiment's shards) all end up with the entry the first one
 * added. ENG_OK; ENG_ERR_FORMAT for a malformed file (err names the file and
 * the field); ENG_ERR_IO when it cannot be read, locked or written. */
int hx_calibration_reference(const char *path, const eng_model *m, const eng_prefill_params *pp,
                             const hx_calibration *measured, hx_calibration *ref, bool *added, char *err,
                             size_t errlen);

/* The entry of path matching a model (its SHA-256), numerics and the chunk
 * length of a prefill from position 0, without loading the model: *found
 * false (ENG_OK) when the file has none or does not exist. Errors as above. */
int hx_calibration_lookup(const char *path, const char *model_sha256, const eng_numerics *num, int32_t len,
                          hx_calibration *out, bool *found, char *err, size_t errlen);

/* The modeled TTFT (ms) of flops and bytes at a calibration (see above). */
double hx_calibration_price_ms(const hx_calibration *c, double flops, double bytes);

#endif /* HX_CALIBRATE_H */
