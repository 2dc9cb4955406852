/*
 * engine/blas_core.h: which OpenBLAS core (kernel set) this CPU should run,
 * and whether the one OpenBLAS picked is older.
 *
 * A DYNAMIC_ARCH OpenBLAS chooses its core in its library constructor,
 * before main, from the CPU model it recognises or from OPENBLAS_CORETYPE;
 * Debian 12's 0.3.21 falls back to an old core (Prescott, SSE3) on CPUs it
 * does not know, although they have AVX2 or AVX-512 (issue 37: 3.3x slower
 * sgemm on an AVX-512 Xeon). This module compares the two by instruction
 * set level: the CPU's, from cpuid and the OS-enabled register state
 * (xgetbv), and the picked core's, from its name. It decides; it never sets
 * the environment or re-executes (harness/cli/blas_select.c does, before
 * anything else runs).
 *
 * Contract: a core or CPU this module does not know is level UNKNOWN and
 * never leads to an action; the core it recommends for a level is one whose
 * kernels need nothing the CPU lacks. The test hook KVREPLAY_TEST_CPU_ISA
 * (sse, avx, avx2, avx512, avx512-bf16) can only lower the detected level,
 * so that no test can make OpenBLAS run instructions the CPU lacks.
 */
#ifndef ENG_BLAS_CORE_H
#define ENG_BLAS_CORE_H

#include <stdbool.h>
#include <stddef.h>

/* Instruction set levels OpenBLAS's x86-64 cores are built for. */
typedef enum eng_isa {
    ENG_ISA_UNKNOWN = 0,
    ENG_ISA_SSE     = 1,  /* SSE2/SSE3/SSE4 cores: Prescott, Core2, Penryn, Nehalem, Atom, Opteron, ... */
    ENG_ISA_AVX     = 2,  /* Sandybridge, Bulldozer, Piledriver, Steamroller */
    ENG_ISA_AVX2    = 3,  /* Haswell, Zen, Excavator: AVX2 and FMA */
    ENG_ISA_AVX512  = 4,  /* SkylakeX, Cooperlake, SapphireRapids: AVX-512 F, BW, DQ, VL */
} eng_isa;

typedef struct eng_cpu_isa {
    eng_isa level;
    bool    bf16;         /* AVX512_BF16 (Cooperlake's kernels need it) */
} eng_cpu_isa;

/* The CPU's level: cpuid feature bits and, for AVX and AVX-512, the
 * register state the OS enables (XCR0). UNKNOWN off x86-64. Lowered by
 * KVREPLAY_TEST_CPU_ISA (tests only; never raised). */
eng_cpu_isa eng_cpu_isa_detect(void);
/* "SSE", "AVX", "AVX2", "AVX-512" (or "AVX-512 and BF16"), "unknown". */
const char *eng_cpu_isa_name(eng_cpu_isa c);
/* Parses the names of KVREPLAY_TEST_CPU_ISA; false when unknown. */
bool        eng_cpu_isa_parse(const char *s, eng_cpu_isa *out);

/* The level an OpenBLAS core name needs (case-insensitive, as OpenBLAS
 * compares OPENBLAS_CORETYPE), UNKNOWN for a name it does not know. */
eng_isa     eng_blas_core_level(const char *core);
/* The core OpenBLAS itself picks for a CPU of this level it recognises:
 * Cooperlake (AVX-512 with BF16), SkylakeX, Haswell, Sandybridge; NULL for
 * SSE and UNKNOWN (no better choice to make). */
const char *eng_blas_core_for(eng_cpu_isa c);

typedef enum eng_blas_action {
    ENG_BLAS_KEEP = 0,    /* the picked core is as new as the CPU allows, or unknown */
    ENG_BLAS_SELECT,      /* OPENBLAS_CORETYPE unset and an older core picked: run `core` instead */
    ENG_BLAS_WARN,        /* the user set OPENBLAS_CORETYPE to an older core: obey, and say so */
} eng_blas_action;

typedef struct eng_blas_plan {
    eng_blas_action action;
    const char     *core;  /* SELECT: the core to run; WARN: the one kvreplay would pick */
    char            why[320];  /* one line for stderr (SELECT, WARN); "" for KEEP */
} eng_blas_plan;

/* What to do, given the CPU, the core OpenBLAS runs (openblas_get_corename())
 * and the OPENBLAS_CORETYPE the user set (NULL or "" when unset). A core is
 * older when its level is below the CPU's (Haswell on an AVX-512 CPU is:
 * docs/engine.md, "The OpenBLAS core", has the measured basis). */
eng_blas_plan eng_blas_core_decide(eng_cpu_isa cpu, const char *picked, const char *user_set);

#endif /* ENG_BLAS_CORE_H */
