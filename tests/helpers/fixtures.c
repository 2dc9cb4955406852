/* tests/helpers/fixtures.c: see fixtures.h. */
#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "synth.h"
#include "transcript.h"

int fx_dir(char *dir, const char *prefix) {
    snprintf(dir, 64, "/tmp/%s_XXXXXX", prefix);
    return mkdtemp(dir) ? 0 : -1;
}

int fx_rm(const char *dir) {
    if (!dir || !dir[0] || getenv("KVR_KEEP")) return 0;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int fx_tiny_model(const char *path, uint64_t seed) {
    eng_synth_params p = eng_synth_preset("tiny");
    p.seed = seed;
    char err[256];
    if (eng_synth_write(&p, path, err, sizeof err) == ENG_OK) return 0;
    fprintf(stderr, "fixture %s: %s\n", path, err);
    return -1;
}

int fx_tiny_model_vocab(const char *path, uint64_t seed, const char *vocab) {
    eng_synth_params p = eng_synth_preset("tiny");
    p.seed = seed;
    p.vocab_path = vocab;
    p.n_vocab = 0;  /* the vocabulary's own size */
    char err[256];
    if (eng_synth_write(&p, path, err, sizeof err) == ENG_OK) return 0;
    fprintf(stderr, "fixture %s: %s\n", path, err);
    return -1;
}

int fx_write_transcript(hx_synth_params *p, const char *path) {
    hx_transcript t;
    char err[256];
    if (hx_synth_transcript(p, &t, err, sizeof err) != ENG_OK) {
        fprintf(stderr, "fixture %s: %s\n", path, err);
        return -1;
    }
    int rc = hx_transcript_write(path, &t, err, sizeof err);
    hx_transcript_free(&t);
    if (rc != ENG_OK) fprintf(stderr, "fixture %s: %s\n", path, err);
    return rc == ENG_OK ? 0 : -1;
}

int fx_transcript(const char *path, hx_synth_scenario sc, uint64_t seed, int turns, int base_bytes) {
    hx_synth_params p;
    hx_synth_params_init(&p, sc);
    p.seed = seed;
    p.sessions = 1;
    p.turns = turns;
    if (base_bytes > 0) p.base_bytes = base_bytes;
    if (sc == HX_SYNTH_EXTEND) p.step_bytes = 300;
    return fx_write_transcript(&p, path);
}
