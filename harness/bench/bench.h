/*
 * harness/bench/bench.h: benchmark entry points that `kvreplay bench` dispatches to.
 * `kvreplay bench -m M [--threads T --chunk C ...]`  engine prefill (cmd_bench.c)
 * `kvreplay bench --tokenizer -m VOCAB.gguf`          tokenizer MB/s (bench_tokenize.c)
 * `kvreplay bench --checkpoints -m M ...`             checkpoint save/restore vs memcpy, prefill
 *                                                     tok/s at 2K/8K/32K (bench_checkpoints.c)
 * `kvreplay bench --disk-cache ...`                   disk checkpoint files (bench_diskcache.c)
 * `kvreplay bench --serve -m M ...`                   serve's TTFT over the in-process TTFT of the
 *                                                     same request (serve/bench_serve.c, serve.h: it
 *                                                     stands on serve's rooms, above this one)
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
 * Each takes the subcommand's argv (argv[0] == "bench") and returns an exit code.
 */
#ifndef HX_BENCH_H
#define HX_BENCH_H

int hx_bench_tokenizer(int argc, char **argv);
int hx_bench_disk_cache(int argc, char **argv);
int hx_bench_checkpoints(int argc, char **argv);
int hx_bench_contention(int argc, char **argv);
int hx_bench_depth(int argc, char **argv);
int hx_bench_memory(int argc, char **argv);
int hx_bench_memory_child(int argc, char **argv);
int hx_bench_table(int argc, char **argv);
int hx_bench_batch(int argc, char **argv);

#endif /* HX_BENCH_H */
