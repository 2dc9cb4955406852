/*
 * harness/store/sysinfo.c: CPU model, online CPUs, hostname, OS release and the
 * BLAS build, for the `runs` table. Reads /proc/cpuinfo, sysconf, uname and
 * OpenBLAS's own description of itself; every failure degrades to "unknown".
 */
#include "sysinfo.h"

#include <cblas.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "status.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Copying with blanks trimmed and collapsed

/* Copies n bytes of src into dst (cap bytes) with leading/trailing blanks
 * removed and runs of blanks (space, tab, CR, LF) folded into one space. */
static void copy_clean(char *dst, size_t cap, const char *src, size_t n) {
    size_t o = 0;
    int pending_space = 0;
    for (size_t i = 0; i < n && src[i] != '\0'; i++) {
        unsigned char c = (unsigned char)src[i];
        if (isspace(c)) {
            pending_space = o > 0;
            continue;
        }
        if (pending_space && o + 1 < cap) dst[o++] = ' ';
        pending_space = 0;
        if (o + 1 < cap) dst[o++] = (char)c;
    }
    dst[o] = '\0';
}

static void set_unknown_if_empty(char *s, size_t cap) {
    if (s[0] == '\0') snprintf(s, cap, "unknown");
}

// ----------------------------------------------------------------------------
// /proc/cpuinfo: the first line whose key is one of a few known names

/* Value of the first "KEY : value" line whose key equals name, or NULL. */
static const char *cpuinfo_value(const char *text, const char *name, size_t *len) {
    size_t nl = strlen(name);
    for (const char *line = text; *line; ) {
        const char *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        const char *colon = memchr(line, ':', (size_t)(end - line));
        if (colon) {
            const char *k = line, *ke = colon;
            while (ke > k && isspace((unsigned char)ke[-1])) ke--;
            if ((size_t)(ke - k) == nl && strncmp(k, name, nl) == 0) {
                *len = (size_t)(end - colon - 1);
                return colon + 1;
            }
        }
        line = *end ? end + 1 : end;
    }
    return NULL;
}

int hx_sysinfo_parse_cpuinfo(const char *text, char *buf, size_t cap) {
    /* x86 "model name"; some ARM kernels "Hardware" or "Processor";
     * MIPS/others "cpu model"; POWER "cpu". */
    static const char *keys[] = {"model name", "Hardware", "Processor", "cpu model", "cpu"};
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        size_t len = 0;
        const char *v = cpuinfo_value(text, keys[i], &len);
        if (!v) continue;
        copy_clean(buf, cap, v, len);
        if (buf[0]) return 1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// The whole description

void hx_sysinfo_get(hx_sysinfo *out) {
    ENG_ASSERT(out != NULL);
    memset(out, 0, sizeof *out);

    struct utsname u;
    if (uname(&u) == 0) {
        char tmp[sizeof u.sysname + sizeof u.release + 2];
        snprintf(tmp, sizeof tmp, "%s %s", u.sysname, u.release);
        copy_clean(out->os_release, sizeof out->os_release, tmp, strlen(tmp));
        copy_clean(out->machine, sizeof out->machine, u.machine, strlen(u.machine));
    }

    char *text = NULL;
    size_t n = 0;
    if (eng_read_file("/proc/cpuinfo", &text, &n, NULL, 0) == ENG_OK) {
        hx_sysinfo_parse_cpuinfo(text, out->cpu, sizeof out->cpu);
        free(text);
    }
    if (out->cpu[0] == '\0' && out->machine[0])
        snprintf(out->cpu, sizeof out->cpu, "%s", out->machine);

    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    out->n_cpus = nc > 0 && nc < INT32_MAX ? (int32_t)nc : 0;

    char host[256] = "";
    if (gethostname(host, sizeof host - 1) == 0)
        copy_clean(out->hostname, sizeof out->hostname, host, strlen(host));

    const char *cfg = openblas_get_config();
    const char *core = openblas_get_corename();
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s%s%s%s", cfg ? cfg : "", core ? " (" : "", core ? core : "",
             core ? ")" : "");
    copy_clean(out->blas, sizeof out->blas, tmp, strlen(tmp));

    set_unknown_if_empty(out->cpu, sizeof out->cpu);
    set_unknown_if_empty(out->hostname, sizeof out->hostname);
    set_unknown_if_empty(out->os_release, sizeof out->os_release);
    set_unknown_if_empty(out->machine, sizeof out->machine);
    set_unknown_if_empty(out->blas, sizeof out->blas);
}

void hx_sysinfo_load(char *buf, size_t cap) {
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (!f || fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3) snprintf(buf, cap, "unknown");
    else snprintf(buf, cap, "%.2f %.2f %.2f", a, b, c);
    if (f) fclose(f);
}
