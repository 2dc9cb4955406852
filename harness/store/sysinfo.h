/*
 * harness/store/sysinfo.h: a description of the machine a run executes on, for the
 * `runs` table (cpu, n_cpus, hostname, os_release, blas) and the report.
 *
 * Invariant: hx_sysinfo_get never fails; a field it cannot learn holds
 * "unknown" (strings) or 0 (n_cpus). Every string is NUL-terminated and has
 * no leading, trailing or repeated blanks. The struct owns its bytes (fixed
 * arrays), so it can be copied and kept as long as the caller likes.
 *
 * Usage:
 *     hx_sysinfo si;
 *     hx_sysinfo_get(&si);
 *     printf("%s, %d cpus, %s, Linux %s\n", si.cpu, si.n_cpus, si.hostname, si.os_release);
 */
#ifndef HX_SYSINFO_H
#define HX_SYSINFO_H

#include <stddef.h>
#include <stdint.h>

typedef struct hx_sysinfo {
    char    cpu[256];         /* /proc/cpuinfo "model name" (or "Hardware", "cpu model", machine) */
    int32_t n_cpus;           /* online CPUs (sysconf _SC_NPROCESSORS_ONLN), 0 when unknown */
    char    hostname[256];    /* gethostname() */
    char    os_release[256];  /* uname(): "SYSNAME RELEASE", e.g. "Linux 6.1.0-18-amd64" */
    char    machine[64];      /* uname() machine, e.g. "x86_64" */
    char    blas[256];        /* OpenBLAS build config and core, e.g. "OpenBLAS 0.3.21 ... (Haswell)" */
} hx_sysinfo;

/* Fills *out (must not be NULL). Never fails; see the invariant above. */
void hx_sysinfo_get(hx_sysinfo *out);

/* The CPU model name parsed from the text of a /proc/cpuinfo file (for
 * tests and other platforms): writes it into buf (cap bytes, NUL-terminated,
 * blanks collapsed) and returns 1, or returns 0 and writes "" when the text
 * names no model. text and buf must not be NULL; cap must be > 0. */
int hx_sysinfo_parse_cpuinfo(const char *text, char *buf, size_t cap);

/* The load average (1, 5, 15 minutes) as "a b c" with two decimals into
 * buf, or "unknown" when /proc/loadavg cannot be read. Never fails. */
void hx_sysinfo_load(char *buf, size_t cap);

#endif /* HX_SYSINFO_H */
