/*
 * harness/bench/bench_diskcache.c: `kvreplay bench --disk-cache`, checkpoint file
 * throughput against plain file I/O of the same size, in the same run.
 *
 * Each repetition, in the same directory (order alternating between reps
 * so that neither side always runs first):
 *   plain: write + fsync a file of the checkpoint's size (72 dummy header
 *          bytes, then the payload); read it back (header into a small
 *          buffer, payload into a fresh one, as a lookup does: page cache);
 *          drop its pages with posix_fadvise(DONTNEED) and read it again;
 *   checkpoint: hx_diskcache_store (header, XXH3 of the payload, temp file,
 *          fsync, rename, directory fsync); hx_diskcache_lookup (read, verify
 *          header and payload checksum, copy out); DONTNEED, lookup again.
 * One unrecorded warm-up repetition runs first. Figures are medians over reps in MB/s (1 MB = 10^6 bytes) of the payload
 * bytes, and checkpoint / plain ratios. XXH3-64 over the payload in memory
 * is timed too: it bounds what verification can cost.
 *
 * Caveats, printed with the figures: reads right after a write come from
 * the page cache; DONTNEED is advisory (it drops clean pages on Linux disk
 * filesystems, and does nothing on tmpfs, where the page cache is the
 * storage), so the "after DONTNEED" row is a device read only when the
 * filesystem reported is a disk one.
 */
#include "bench.h"
#include "bench_util.h"
#include "diskcache.h"
#include "options.h"
#include "stats.h"
#include "status.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <xxhash.h>

static const char k_usage[] =
    "usage: kvreplay bench --disk-cache [--mb N] [--reps N] [--dir D] [--json]\n"
    "\n"
    "Checkpoint file write (store: checksum, temp file, fsync, rename, dir fsync)\n"
    "and read (lookup: read + verify) throughput against plain write+fsync and\n"
    "read of the same size, medians of reps, side by side in one run.\n"
    "\n";

typedef struct disk_args {
    int32_t     mb, reps;
    const char *parent;
    bool        json, self;
} disk_args;

#define OPT(field) offsetof(disk_args, field)
static const hx_option k_options[] = {
    {"--disk-cache", NULL, NULL, NULL, HX_OPT_FLAG, OPT(self), 0, 0, NULL},
    {"--mb", NULL, "N", "payload size in MB (10^6 bytes), default 64", HX_OPT_INT, OPT(mb), 1, 65536, NULL},
    {"--reps", NULL, "N", "repetitions, default 5", HX_OPT_INT, OPT(reps), 1, 1000, NULL},
    {"--dir", NULL, "D", "parent directory for the scratch directory, default /tmp\n"
     "(the filesystem type is reported: tmpfs measures memory)", HX_OPT_STRING, OPT(parent), 0, 0, NULL},
    {"--json", NULL, NULL, "print one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

// ----------------------------------------------------------------------------
// Small helpers: filesystem name, medians, plain file I/O

static const char *fs_name(long type) {
    switch ((unsigned long)type) {
    case 0x01021994UL: return "tmpfs";
    case 0x0000EF53UL: return "ext4";
    case 0x58465342UL: return "xfs";
    case 0x9123683EUL: return "btrfs";
    case 0x794C7630UL: return "overlayfs";
    case 0x00006969UL: return "nfs";
    case 0x2FC12FC1UL: return "zfs";
    case 0xF2F52010UL: return "f2fs";
    case 0x65735546UL: return "fuse";
    case 0x858458F6UL: return "ramfs";
    default:           return NULL;
    }
}

/* Writes a 72-byte dummy header then the payload (the checkpoint file's
 * shape) and fsyncs; returns seconds or -1 (message in err). */
static double plain_write(const char *path, const void *buf, size_t n, char *err, size_t errlen) {
    static const uint8_t head[HX_DISKCACHE_HEADER_SIZE];
    double t0 = eng_now_s();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || eng_write_all(fd, head, sizeof head) != 0 || eng_write_all(fd, buf, n) != 0 ||
        fsync(fd) != 0) {
        eng_errf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (close(fd) != 0) {
        eng_errf(err, errlen, "%s: close failed: %s", path, strerror(errno));
        return -1;
    }
    return eng_now_s() - t0;
}

/* Reads the 72-byte header into a small buffer and the n payload bytes
 * into a fresh malloc'd one (freed after timing), as a lookup does: the
 * same I/O shape matters, since the alignment of file offset against buffer
 * changes the kernel's copy speed. Returns seconds or -1. */
static double plain_read(const char *path, size_t n, char *err, size_t errlen) {
    uint8_t head[HX_DISKCACHE_HEADER_SIZE];
    double t0 = eng_now_s();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = malloc(n ? n : 1);
    size_t got = 0, want = sizeof head + n;
    while (fd >= 0 && buf && got < want) {
        ssize_t r = got < sizeof head ? read(fd, head + got, sizeof head - got)
                                      : read(fd, buf + (got - sizeof head), want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    double dt = eng_now_s() - t0;
    if (fd >= 0) close(fd);
    free(buf);
    if (fd < 0 || !buf || got != want) {
        eng_errf(err, errlen, "%s: read failed after %zu of %zu bytes: %s", path, got, want,
                 strerror(errno));
        return -1;
    }
    return dt;
}

/* Asks the kernel to drop path's (clean) cached pages. Advisory. */
static void drop_pages(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

// ----------------------------------------------------------------------------
// One repetition of the checkpoint side

typedef struct ckpt_times {
    double write, read, read_dropped;  /* seconds */
} ckpt_times;

static int ckpt_rep(const char *cache_dir, const int32_t *tokens, int32_t n_tokens,
                    const uint8_t *payload, size_t size, ckpt_times *t, char *err, size_t errlen) {
    hx_diskcache *dc = NULL;
    hx_diskcache_hit hit = {0};
    hx_diskcache_entry *ents = NULL;
    size_t n_ents = 0;
    int rc = hx_diskcache_open(cache_dir, (int64_t)size * 2 + (1 << 20), &dc, err, errlen);
    if (rc != ENG_OK) goto out;

    double t0 = eng_now_s();
    rc = hx_diskcache_store(dc, 1, tokens, n_tokens, payload, size, NULL, err, errlen);
    t->write = eng_now_s() - t0;
    if (rc != HX_DISKCACHE_STORED) {
        if (rc >= 0) eng_errf(err, errlen, "%s: store was not written (%d)", cache_dir, rc);
        rc = rc < 0 ? rc : ENG_ERR_IO;
        goto out;
    }
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            rc = hx_diskcache_list(dc, &ents, &n_ents);
            if (rc != ENG_OK || n_ents != 1) {
                eng_errf(err, errlen, "%s: cannot list the checkpoint", cache_dir);
                rc = rc ? rc : ENG_ERR_IO;
                goto out;
            }
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s/%s", cache_dir, ents[0].name);
            drop_pages(path);
        }
        t0 = eng_now_s();
        rc = hx_diskcache_lookup(dc, 1, tokens, n_tokens, n_tokens, &hit, err, errlen);
        double dt = eng_now_s() - t0;
        if (rc != ENG_OK) goto out;
        if (hit.n_tokens != n_tokens || hit.payload_size != size ||
            memcmp(hit.payload, payload, size) != 0) {
            eng_errf(err, errlen, "%s: lookup did not return the stored payload", cache_dir);
            rc = ENG_ERR_IO;
            goto out;
        }
        hx_diskcache_hit_free(&hit);
        if (pass == 0) t->read = dt;
        else t->read_dropped = dt;
    }
out:
    hx_diskcache_hit_free(&hit);
    if (dc) {  // leave nothing behind
        free(ents);
        ents = NULL;
        if (hx_diskcache_list(dc, &ents, &n_ents) == ENG_OK)
            for (size_t i = 0; i < n_ents; i++) {
                char path[PATH_MAX + 64];
                snprintf(path, sizeof path, "%s/%s", cache_dir, ents[i].name);
                unlink(path);
            }
        hx_diskcache_close(dc);
    }
    free(ents);
    rmdir(cache_dir);
    return rc;
}

// ----------------------------------------------------------------------------
// The command

int hx_bench_disk_cache(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) {
        hx_usage(stdout, k_usage, k_options);
        return ENG_OK;
    }
    disk_args a = {.mb = 64, .reps = 5, .parent = "/tmp"};
    int rc = hx_bench_args(k_options, &a, argc, argv, "bench --disk-cache", err, errlen);
    if (rc) return rc;
    int64_t mb = a.mb, reps = a.reps;
    const char *parent = a.parent;
    bool json = a.json;

    const size_t size = (size_t)mb * 1000000u;
    enum { N_TOK = 4096 };
    char why[512] = "", work[PATH_MAX] = "", plain[PATH_MAX + 16] = "", cache[PATH_MAX + 16] = "";
    int32_t *tokens = malloc(N_TOK * sizeof *tokens);
    uint8_t *payload = malloc(size);
    double *v = calloc((size_t)reps * 7, sizeof *v);
    if (!tokens || !payload || !v) {
        eng_errf(err, errlen, "bench --disk-cache: out of memory for %zu bytes", size);
        rc = ENG_ERR_NOMEM;
        goto out;
    }
    double *wp = v, *rp = v + reps, *rpd = v + 2 * reps, *wc = v + 3 * reps, *rck = v + 4 * reps,
           *rcd = v + 5 * reps, *xx = v + 6 * reps;
    uint64_t s = 0x5eed;
    for (size_t i = 0; i < size; i += 8) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t r = s ^ (s >> 29);
        memcpy(payload + i, &r, size - i < 8 ? size - i : 8);
    }
    for (int i = 0; i < N_TOK; i++) tokens[i] = (int32_t)(i * 2654435761u % 32000u);

    if (snprintf(work, sizeof work, "%s/kvr_bench_dc_XXXXXX", parent) >= (int)sizeof work) {
        eng_errf(err, errlen, "bench --disk-cache: --dir: path too long");
        work[0] = '\0';
        rc = ENG_ERR_ARG;
        goto out;
    }
    if (!mkdtemp(work)) {
        int e = errno;  /* a --dir that is missing, not a directory or not writable is the user's to fix */
        eng_errf(err, errlen, "bench --disk-cache: --dir %s: cannot create %s in it: %s", parent, work, strerror(e));
        rc = e == ENOENT || e == ENOTDIR || e == EACCES || e == EROFS ? ENG_ERR_ARG : ENG_ERR_IO;
        work[0] = '\0';
        goto out;
    }
    struct statfs sfs;
    char fs[32];
    if (statfs(work, &sfs) == 0) {
        const char *nm = fs_name((long)sfs.f_type);
        if (nm) snprintf(fs, sizeof fs, "%s", nm);
        else snprintf(fs, sizeof fs, "0x%lx", (unsigned long)sfs.f_type);
    } else {
        snprintf(fs, sizeof fs, "unknown");
    }
    snprintf(plain, sizeof plain, "%s/plain.bin", work);
    snprintf(cache, sizeof cache, "%s/cache", work);

    const double mbytes = (double)size / 1e6;
    for (int r = -1; r < reps; r++) {  // rep -1 warms up the allocator and caches: not counted
        int k = r < 0 ? 0 : r;
        for (int side = 0; side < 2; side++) {
            if ((side ^ (k & 1)) == 0) {  // plain
                double tw = plain_write(plain, payload, size, why, sizeof why);
                double tr = tw < 0 ? -1 : plain_read(plain, size, why, sizeof why);
                if (tr >= 0) drop_pages(plain);
                double td = tr < 0 ? -1 : plain_read(plain, size, why, sizeof why);
                unlink(plain);
                if (td < 0) {
                    rc = ENG_ERR_IO;
                    goto io_fail;
                }
                wp[k] = mbytes / tw;
                rp[k] = mbytes / tr;
                rpd[k] = mbytes / td;
            } else {
                ckpt_times t = {0};
                if ((rc = ckpt_rep(cache, tokens, N_TOK, payload, size, &t, why, sizeof why)) != ENG_OK)
                    goto io_fail;
                wc[k] = mbytes / t.write;
                rck[k] = mbytes / t.read;
                rcd[k] = mbytes / t.read_dropped;
            }
        }
        double t0 = eng_now_s();
        volatile uint64_t h = XXH3_64bits(payload, size);
        (void)h;
        xx[k] = mbytes / (eng_now_s() - t0);
        if (eng_stderr_is_tty() && r >= 0)
            fprintf(stderr, "\rbench --disk-cache: rep %d/%d", r + 1, (int)reps);
    }
    if (eng_stderr_is_tty()) fputc('\n', stderr);

    double m_wp = hx_median(wp, (int)reps), m_rp = hx_median(rp, (int)reps), m_rpd = hx_median(rpd, (int)reps);
    double m_wc = hx_median(wc, (int)reps), m_rc = hx_median(rck, (int)reps), m_rcd = hx_median(rcd, (int)reps);
    double m_xx = hx_median(xx, (int)reps);
    const char *note = strcmp(fs, "tmpfs") == 0 || strcmp(fs, "ramfs") == 0
                           ? "tmpfs: every read and write is a memory copy; DONTNEED has no effect"
                           : "reads right after the write are page-cache reads; the DONTNEED rows "
                             "are device reads only if the kernel honoured the advice";
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "bench", json_string("disk-cache"));
        json_object_set_new(o, "payload_bytes", json_integer((json_int_t)size));
        json_object_set_new(o, "file_bytes", json_integer((json_int_t)(size + HX_DISKCACHE_HEADER_SIZE)));
        json_object_set_new(o, "reps", json_integer(reps));
        json_object_set_new(o, "dir", json_string(work));
        json_object_set_new(o, "filesystem", json_string(fs));
        json_object_set_new(o, "write_plain_mb_s", json_real(m_wp));
        json_object_set_new(o, "write_ckpt_mb_s", json_real(m_wc));
        json_object_set_new(o, "write_ratio", json_real(m_wc / m_wp));
        json_object_set_new(o, "read_plain_mb_s", json_real(m_rp));
        json_object_set_new(o, "read_ckpt_mb_s", json_real(m_rc));
        json_object_set_new(o, "read_ratio", json_real(m_rc / m_rp));
        json_object_set_new(o, "read_dropped_plain_mb_s", json_real(m_rpd));
        json_object_set_new(o, "read_dropped_ckpt_mb_s", json_real(m_rcd));
        json_object_set_new(o, "read_dropped_ratio", json_real(m_rcd / m_rpd));
        json_object_set_new(o, "xxh3_mb_s", json_real(m_xx));
        json_object_set_new(o, "note", json_string(note));
        char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        json_decref(o);
        if (!txt) {
            eng_errf(err, errlen, "bench --disk-cache: cannot format JSON");
            rc = ENG_ERR_NOMEM;
            goto out;
        }
        printf("%s\n", txt);
        free(txt);
    } else {
        printf("disk cache: payload %.0f MB (%zu bytes + %u header), %d reps, medians\n", mbytes,
               size, HX_DISKCACHE_HEADER_SIZE, (int)reps);
        printf("directory:  %s (%s)\n\n", work, fs);
        printf("%-26s %12s %16s %8s\n", "", "plain MB/s", "checkpoint MB/s", "ratio");
        printf("%-26s %12.1f %16.1f %8.3f\n", "write + fsync", m_wp, m_wc, m_wc / m_wp);
        printf("%-26s %12.1f %16.1f %8.3f\n", "read (page cache)", m_rp, m_rc, m_rc / m_rp);
        printf("%-26s %12.1f %16.1f %8.3f\n", "read (after DONTNEED)", m_rpd, m_rcd, m_rcd / m_rpd);
        printf("\nXXH3-64 over the payload in memory: %.1f MB/s\n", m_xx);
        printf("note: %s\n", note);
    }
    rc = hx_bench_flush("bench --disk-cache", err, errlen);
    goto out;
io_fail:  /* files of the benchmark's own scratch directory: never the user's input */
    eng_errf(err, errlen, "bench --disk-cache: %s", why);
    rc = hx_bench_failed(rc);
out:
    if (work[0] && plain[0]) {
        unlink(plain);
        rmdir(cache);
    }
    if (work[0]) rmdir(work);
    free(tokens);
    free(payload);
    free(v);
    return rc;
}
