/*
 * harness/bench/bench.h: the benchmarks `kvreplay bench` runs (cli/cmd_bench.c
 * picks one by its flag):
 * `kvreplay bench -m M [--threads T --chunk C ...]`  engine prefill and decode against the
 *                                                     same run's sgemm and FMA peaks (bench_prefill.c)
 * `kvreplay bench --tokenizer -m VOCAB.gguf`          tokenizer MB/s (bench_tokenize.c)
 * `kvreplay bench --checkpoints -m M ...`             checkpoint save/restore vs memcpy, prefill
 *                                                     tok/s at 2K/8K/32K (bench_checkpoints.c)
 * `kvreplay bench --disk-cache ...`                   disk checkpoint files (bench_diskcache.c)
 * `kvreplay bench --serve -m M ...`                   serve's TTFT over the in-process TTFT of the
 *                                                     same request (serve/bench_serve.c: it stands
 *                                                     on serve, above this folder)
 * `kvreplay bench --contention -m M ...`              prefill quiet vs beside busy competitors
 *                                                     it starts itself (bench_load.c)
 * `kvreplay bench --depth LIST -m M ...`              prefill of N tokens at a depth of context,
 *                                                     attention's marginal GFLOP/s (bench_depth.c)
 * `kvreplay bench --memory -m M ...`                  KV and state bytes, peak RSS of a prefill
 *                                                     (bench_depth.c; --memory-child is its child)
 * `kvreplay bench --table DIR`                        the issue targets' table from the JSON of a
 *                                                     `make bench` run (bench_table.c)
 * `kvreplay bench --batch B -m M ...`                 decode and prefill of b sequences one by one vs
 *                                                     in batched steps, b up to B; bits (bench_batch.c)
 *
 * Each is an hx_bench_fn: it takes the subcommand's argv (argv[0] ==
 * "bench", its own flag among the options), prints --help itself and its
 * figures on stdout, and returns an ENG_ status, never exiting: ENG_OK;
 * ENG_ERR_ARG for usage and for an input the user named that cannot be
 * used (exit 2), the message naming the flag or the path; ENG_ERR_NOMEM,
 * or the status of work that failed under way (bench_util.h's
 * hx_bench_failed: exit 3). The message goes into err (errlen bytes).
 */
#ifndef HX_BENCH_H
#define HX_BENCH_H

#include <stddef.h>

typedef int (*hx_bench_fn)(int argc, char **argv, char *err, size_t errlen);

int hx_bench_prefill(int argc, char **argv, char *err, size_t errlen);
int hx_bench_tokenizer(int argc, char **argv, char *err, size_t errlen);
int hx_bench_disk_cache(int argc, char **argv, char *err, size_t errlen);
int hx_bench_checkpoints(int argc, char **argv, char *err, size_t errlen);
int hx_bench_contention(int argc, char **argv, char *err, size_t errlen);
int hx_bench_depth(int argc, char **argv, char *err, size_t errlen);
int hx_bench_memory(int argc, char **argv, char *err, size_t errlen);
int hx_bench_memory_child(int argc, char **argv, char *err, size_t errlen);
int hx_bench_table(int argc, char **argv, char *err, size_t errlen);
int hx_bench_batch(int argc, char **argv, char *err, size_t errlen);

#endif /* HX_BENCH_H */
