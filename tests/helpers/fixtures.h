/*
 * tests/helpers/fixtures.h: the fixtures tests make for themselves in a
 * scratch directory (no shared data needed): the tiny synthetic model with
 * its built-in byte vocabulary and seeded synthetic transcripts.
 */
#ifndef KVR_TESTS_FIXTURES_H
#define KVR_TESTS_FIXTURES_H

#include <stdint.h>

#include "synth_transcript.h"

/* mkdtemp("/tmp/PREFIX_XXXXXX") into dir (>= 64 bytes); 0 or -1. */
int fx_dir(char *dir, const char *prefix);
/* Removes dir and everything in it, unless KVR_KEEP is set (to inspect a
 * failure); 0 or -1. Does nothing for a NULL or empty name. */
int fx_rm(const char *dir);
/* The tiny llama preset (built-in 259-token byte vocabulary) with seed, at path; 0 or -1. */
int fx_tiny_model(const char *path, uint64_t seed);
/* The same with the vocabulary of a GGUF file (e.g. ../shared/data/vocab/ggml-vocab-llama-spm.gguf):
 * its tokenizer, chat template and size; 0 or -1. */
int fx_tiny_model_vocab(const char *path, uint64_t seed, const char *vocab);
/* Writes the seeded synthetic transcript of p to path; 0 or -1. */
int fx_write_transcript(hx_synth_params *p, const char *path);
/* A transcript of scenario sc (seed, turns requests per session, one session;
 * base_bytes for extend/static) written to path; 0 or -1. */
int fx_transcript(const char *path, hx_synth_scenario sc, uint64_t seed, int turns, int base_bytes);

#endif
