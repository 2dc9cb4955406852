/* tests/helpers/fixtures.c: see fixtures.h. */
#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>

#include "status.h"
#include "transcript.h"

int fx_write_transcript(hx_synth_params *p, const char *path) {
    hx_transcript t;
    char err[256];
    if (hx_synth_transcript(p, &t, err, sizeof err) != ENG_OK) return -1;
    int rc = hx_transcript_write(path, &t, err, sizeof err);
    hx_transcript_free(&t);
    return rc == ENG_OK ? 0 : -1;
}

int fx_remove_dir(const char *dir) {
    if (!dir[0] || getenv("KVR_KEEP")) return 0;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}
