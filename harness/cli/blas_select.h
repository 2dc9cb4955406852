/*
 * harness/cli/blas_select.h: the OpenBLAS core, chosen before anything runs.
 *
 * Called first in main. For the commands that compute with the engine, when
 * OPENBLAS_CORETYPE is unset and OpenBLAS picked a core older than the CPU
 * supports (engine/blas_core.h), it sets OPENBLAS_CORETYPE to the right core
 * and re-executes /proc/self/exe with the same arguments: OpenBLAS reads the
 * variable in its library constructor, before main, so this is the one way
 * to change its core without linking it differently. The new process says
 * once on stderr what was done and why; the core is then in every run's
 * `blas` and in the model fingerprint, as OpenBLAS reports it. A user who
 * set the variable is obeyed, and warned once (per process tree) when that
 * core is older than the CPU. Tests plant the picked core with
 * KVREPLAY_TEST_BLAS_PICKED (read only when the variable is unset).
 */
#ifndef HX_BLAS_SELECT_H
#define HX_BLAS_SELECT_H

void hx_blas_core_select(int argc, char **argv);

#endif /* HX_BLAS_SELECT_H */
