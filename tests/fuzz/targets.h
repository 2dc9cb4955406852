/*
 * tests/fuzz/targets.h: the fuzz targets of kvreplay, as plain functions.
 *
 * Each target feeds one input (any bytes) to one parser of what users bring
 * (GGUF files, models, text for the tokenizers, transcripts, every importer,
 * checkpoint files, serialized state) and checks the parser's promises: it
 * returns an error or a value, never crashes, leaks, reads out of bounds or
 * hits undefined behaviour, and what it accepts is consistent (ids inside
 * the vocabulary, a state blob that serializes back to itself, ...). A broken
 * promise aborts.
 *
 * The same functions run in two harnesses:
 *   - libFuzzer (`make fuzz`, tests/fuzz/libfuzzer.c, clang with ASan+UBSan):
 *     KVR_FUZZ_TARGET=NAME selects the target;
 *   - the regression replay of `make test` (tests/test_fuzz_corpus.c, the
 *     normal build): every file of tests/fuzz/corpus/NAME/ (seeds) and
 *     tests/fuzz/crashes/NAME/ (every crash, leak or timeout a fuzzer ever
 *     found, kept as a regression input) goes through target NAME.
 *
 * Targets (the importers come from the registry, so a new one is a target):
 *   gguf           eng_gguf_open_buffer, every key/array/tensor getter, and
 *                  the tokenizer loader on what it opened
 *   model          eng_model_load of the bytes as a file, then a 3-token
 *                  prefill and a decode
 *   tokenize-spm   eng_tokenize/eng_detokenize with a real SentencePiece
 *   tokenize-bpe   vocabulary and a real byte-level BPE one (../shared/data;
 *                  byte 0 of the input picks flags and the vocabulary)
 *   transcript     hx_transcript_parse (both --skip-bad modes), serialize and
 *                  parse back (equal), then render and tokenize every request
 *   import-NAME    hx_import_buffer with importer NAME (both --skip-bad modes)
 *   api-NAME       every route of API dialect NAME (harness/api/): the bytes as
 *                  a request body (an accepted request sends and parses back
 *                  equal), as a response body, as an SSE stream, as an error
 *   checkpoint     a cache directory holding the bytes as a checkpoint file:
 *                  open (header scan), lookup (verify, then the state blob
 *                  deserialized as the disk-anchor policy does)
 *   state          eng_seq_deserialize into the tiny model of each synthetic
 *                  architecture (engine/synth.h's registry; byte 0 picks it),
 *                  then serialize back and decode a token
 *   trace-mooncake hx_trace_next over the bytes as a Mooncake or Bailian trace
 *   trace-bailian  (--repeat 2); what is accepted keeps the reader's promises
 *                  and runs through block-hash and radix caches of 8 blocks
 *                  whose invariants are checked
 * For checkpoint and state, byte 0 bit 7 asks the harness to reseal the
 * input (fingerprint and checksums fixed up), so mutations reach the checks
 * behind the checksums.
 */
#ifndef KVR_FUZZ_TARGETS_H
#define KVR_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvr_fuzz_target {
    char name[48];
    void (*run)(const uint8_t *data, size_t size, int arg);
    int  arg;  /* the importer index for import-NAME, the dialect index for api-NAME */
} kvr_fuzz_target;

/* Every target, static ones first then one per registered importer; returns
 * how many (at most cap written). */
int kvr_fuzz_targets(kvr_fuzz_target *out, int cap);
/* The target named name, or NULL. */
const kvr_fuzz_target *kvr_fuzz_find(const char *name);
/* Prepares what the targets share (models, vocabularies, a scratch
 * directory); call once before running inputs. Idempotent. */
void kvr_fuzz_init(void);
/* Whether target t can run here: 0, or -1 with why (the shared vocabularies
 * of the tokenizer targets are absent). */
int kvr_fuzz_available(const kvr_fuzz_target *t, char *why, size_t cap);

/* The fixtures, for the seed generator (tests/fuzz/seeds.c): the tiny model
 * of synthetic architecture a (eng_synth_arch_name(a); NULL past the last),
 * and the prompt the checkpoint target looks up (*n tokens). After
 * kvr_fuzz_init. */
const struct eng_model *kvr_fuzz_fixture_model(int a);
const int32_t *kvr_fuzz_fixture_tokens(int *n);

#endif
