/*
 * engine/blas_core.c: the CPU's instruction set level, the level of an
 * OpenBLAS core name, and the decision between them (blas_core.h).
 */
#include "blas_core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

// ----------------------------------------------------------------------------
// The CPU

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xcr0(void) {
    uint32_t a, d;
    __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
    return ((uint64_t)d << 32) | a;
}

static eng_cpu_isa detect_x86(void) {
    eng_cpu_isa c = {ENG_ISA_UNKNOWN, false};
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
    if (!(d & (1u << 26))) return c;  /* no SSE2: not a CPU any x86-64 core serves */
    c.level = ENG_ISA_SSE;
    const bool osxsave = cx & (1u << 27), avx = cx & (1u << 28), fma = cx & (1u << 12);
    const uint64_t x = osxsave ? xcr0() : 0;
    const bool ymm = (x & 0x6) == 0x6, zmm = (x & 0xe6) == 0xe6;  /* SSE, AVX; opmask, ZMM_Hi256, Hi16_ZMM */
    if (!(avx && ymm)) return c;
    c.level = ENG_ISA_AVX;
    if (__get_cpuid_max(0, NULL) < 7) return c;
    __cpuid_count(7, 0, a, b, cx, d);
    const bool avx2 = b & (1u << 5), f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
               vl = b & (1u << 31);
    if (!(avx2 && fma)) return c;
    c.level = ENG_ISA_AVX2;
    if (!(f && dq && bw && vl && zmm)) return c;
    c.level = ENG_ISA_AVX512;
    __cpuid_count(7, 1, a, b, cx, d);
    c.bf16 = a & (1u << 5);
    return c;
}
#endif

bool eng_cpu_isa_parse(const char *s, eng_cpu_isa *out) {
    static const struct { const char *name; eng_isa level; bool bf16; } t[] = {
        {"sse", ENG_ISA_SSE, false},       {"avx", ENG_ISA_AVX, false},
        {"avx2", ENG_ISA_AVX2, false},     {"avx512", ENG_ISA_AVX512, false},
        {"avx512-bf16", ENG_ISA_AVX512, true},
    };
    for (size_t i = 0; s && i < sizeof t / sizeof t[0]; i++)
        if (!strcasecmp(s, t[i].name)) {
            out->level = t[i].level;
            out->bf16 = t[i].bf16;
            return true;
        }
    return false;
}

eng_cpu_isa eng_cpu_isa_detect(void) {
    eng_cpu_isa c = {ENG_ISA_UNKNOWN, false};
#if defined(__x86_64__) || defined(__i386__)
    c = detect_x86();
#endif
    eng_cpu_isa fake;
    const char *t = getenv("KVREPLAY_TEST_CPU_ISA");
    if (t && *t && eng_cpu_isa_parse(t, &fake)) {  /* lower only */
        if (fake.level < c.level) c = fake;
        else if (fake.level == c.level) c.bf16 = c.bf16 && fake.bf16;
    }
    return c;
}

const char *eng_cpu_isa_name(eng_cpu_isa c) {
    switch (c.level) {
    case ENG_ISA_SSE:    return "SSE";
    case ENG_ISA_AVX:    return "AVX";
    case ENG_ISA_AVX2:   return "AVX2";
    case ENG_ISA_AVX512: return c.bf16 ? "AVX-512 and BF16" : "AVX-512";
    default:             return "unknown";
    }
}

// ----------------------------------------------------------------------------
// OpenBLAS's cores (0.3.21's DYNAMIC_ARCH x86-64 list, and later names)

eng_isa eng_blas_core_level(const char *core) {
    static const struct { const char *name; eng_isa level; } t[] = {
        {"prescott", ENG_ISA_SSE},      {"core2", ENG_ISA_SSE},         {"penryn", ENG_ISA_SSE},
        {"dunnington", ENG_ISA_SSE},    {"nehalem", ENG_ISA_SSE},       {"atom", ENG_ISA_SSE},
        {"opteron", ENG_ISA_SSE},       {"opteron_sse3", ENG_ISA_SSE},  {"barcelona", ENG_ISA_SSE},
        {"bobcat", ENG_ISA_SSE},        {"katmai", ENG_ISA_SSE},        {"coppermine", ENG_ISA_SSE},
        {"northwood", ENG_ISA_SSE},     {"banias", ENG_ISA_SSE},        {"athlon", ENG_ISA_SSE},
        {"sandybridge", ENG_ISA_AVX},   {"bulldozer", ENG_ISA_AVX},     {"piledriver", ENG_ISA_AVX},
        {"steamroller", ENG_ISA_AVX},   {"haswell", ENG_ISA_AVX2},      {"zen", ENG_ISA_AVX2},
        {"excavator", ENG_ISA_AVX2},    {"skylakex", ENG_ISA_AVX512},   {"cooperlake", ENG_ISA_AVX512},
        {"sapphirerapids", ENG_ISA_AVX512},
    };
    for (size_t i = 0; core && i < sizeof t / sizeof t[0]; i++)
        if (!strcasecmp(core, t[i].name)) return t[i].level;
    return ENG_ISA_UNKNOWN;
}

const char *eng_blas_core_for(eng_cpu_isa c) {
    switch (c.level) {
    case ENG_ISA_AVX512: return c.bf16 ? "Cooperlake" : "SkylakeX";
    case ENG_ISA_AVX2:   return "Haswell";
    case ENG_ISA_AVX:    return "Sandybridge";
    default:             return NULL;
    }
}

static const char *level_name(eng_isa l) {
    eng_cpu_isa c = {l, false};
    return eng_cpu_isa_name(c);
}

// ----------------------------------------------------------------------------
// The decision

eng_blas_plan eng_blas_core_decide(eng_cpu_isa cpu, const char *picked, const char *user_set) {
    eng_blas_plan p = {ENG_BLAS_KEEP, NULL, ""};
    const eng_isa have = eng_blas_core_level(picked);
    const char *best = eng_blas_core_for(cpu);
    if (have == ENG_ISA_UNKNOWN || !best || have >= cpu.level) return p;
    p.core = best;
    if (user_set && *user_set) {
        p.action = ENG_BLAS_WARN;
        snprintf(p.why, sizeof p.why,
                 "OPENBLAS_CORETYPE=%s: OpenBLAS runs its %s kernels (%s) on a CPU with %s; kvreplay would "
                 "run %s (unset OPENBLAS_CORETYPE to let it)", user_set, picked, level_name(have),
                 eng_cpu_isa_name(cpu), best);
    } else {
        p.action = ENG_BLAS_SELECT;
        snprintf(p.why, sizeof p.why,
                 "OpenBLAS picked its %s kernels (%s) on a CPU with %s: running with OPENBLAS_CORETYPE=%s "
                 "instead (set OPENBLAS_CORETYPE to choose yourself)", picked, level_name(have),
                 eng_cpu_isa_name(cpu), best);
    }
    return p;
}
