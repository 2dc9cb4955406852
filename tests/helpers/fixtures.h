/*
 * tests/helpers/fixtures.h: fixture files that several tests make in their
 * temporary directory.
 */
#ifndef KVR_TESTS_FIXTURES_H
#define KVR_TESTS_FIXTURES_H

#include "synth_transcript.h"

/* Writes the seeded synthetic transcript of p to path; 0 or -1. */
int fx_write_transcript(hx_synth_params *p, const char *path);
/* Removes dir and everything in it, unless KVR_KEEP is set (to inspect a
 * failure); 0 or -1. Does nothing for an empty name. */
int fx_remove_dir(const char *dir);

#endif
