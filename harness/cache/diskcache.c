/*
 * harness/cache/diskcache.c: checkpoint files on disk, keyed by token prefix.
 *
 * See diskcache.h for the contract and docs/disk-cache.md for the layout.
 * The story of this file: little-endian codecs and hashing; the header;
 * the in-memory index; quarantine and eviction; open/close; store; lookup.
 *
 * Invariant kept by every function here: dc->e[0..n) lists exactly the
 * files named <key>.kv this handle believes complete, and dc->bytes is the
 * sum of their file_bytes, never above dc->budget after open or a store.
 */
#include "diskcache.h"
#include "status.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

// ----------------------------------------------------------------------------
// Little-endian codecs and hashing of token prefixes

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Feeds tokens[from..to) into st as int32 little-endian bytes. */
static void hash_tokens(XXH3_state_t *st, const int32_t *tokens, int32_t from, int32_t to) {
    if (to <= from) return;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    XXH3_128bits_update(st, tokens + from, (size_t)(to - from) * sizeof(int32_t));
#else
    uint8_t buf[4 * 256];
    while (from < to) {
        int32_t m = to - from < 256 ? to - from : 256;
        for (int32_t i = 0; i < m; i++) put_u32(buf + 4 * i, (uint32_t)tokens[from + i]);
        XXH3_128bits_update(st, buf, (size_t)m * 4);
        from += m;
    }
#endif
}

/* key = XXH3-128(prefix hash lo, hi, fingerprint, n_tokens), all LE. */
static void key_of(const uint64_t ph[2], uint64_t fp, int32_t n, uint64_t key[2]) {
    uint8_t b[28];
    put_u64(b, ph[0]);
    put_u64(b + 8, ph[1]);
    put_u64(b + 16, fp);
    put_u32(b + 24, (uint32_t)n);
    XXH128_hash_t h = XXH3_128bits(b, sizeof b);
    key[0] = h.low64;
    key[1] = h.high64;
}

static void name_of(const uint64_t key[2], char *name) {
    snprintf(name, 36, "%016llx%016llx.kv", (unsigned long long)key[1],
             (unsigned long long)key[0]);
}

void hx_diskcache_key(uint64_t fingerprint, const int32_t *tokens, int32_t n_tokens,
                      uint64_t prefix_hash[2], uint64_t key[2], char *name) {
    XXH3_state_t *st = XXH3_createState();
    ENG_ASSERT(st != NULL);  // 576 bytes: failing here is not recoverable input
    XXH3_128bits_reset(st);
    if (tokens && n_tokens > 0) hash_tokens(st, tokens, 0, n_tokens);
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    uint64_t ph[2] = {h.low64, h.high64}, k[2];
    key_of(ph, fingerprint, n_tokens, k);
    if (prefix_hash) { prefix_hash[0] = ph[0]; prefix_hash[1] = ph[1]; }
    if (key) { key[0] = k[0]; key[1] = k[1]; }
    if (name) name_of(k, name);
}

// ----------------------------------------------------------------------------
// The header: 72 bytes, sealed by an XXH3-64 of its first 64

typedef struct hdr {
    uint32_t version, header_size, reserved;
    int32_t  n_tokens;
    uint64_t fp, ph[2], payload_size, payload_sum, header_sum;
    char     magic[8];
} hdr;

static void hdr_encode(const hdr *h, uint8_t out[HX_DISKCACHE_HEADER_SIZE]) {
    memcpy(out + HX_DISKCACHE_OFF_MAGIC, h->magic, 8);
    put_u32(out + HX_DISKCACHE_OFF_VERSION, h->version);
    put_u32(out + HX_DISKCACHE_OFF_HEADER_SIZE, h->header_size);
    put_u32(out + HX_DISKCACHE_OFF_N_TOKENS, (uint32_t)h->n_tokens);
    put_u32(out + HX_DISKCACHE_OFF_RESERVED, h->reserved);
    put_u64(out + HX_DISKCACHE_OFF_FINGERPRINT, h->fp);
    put_u64(out + HX_DISKCACHE_OFF_PREFIX_HASH, h->ph[0]);
    put_u64(out + HX_DISKCACHE_OFF_PREFIX_HASH + 8, h->ph[1]);
    put_u64(out + HX_DISKCACHE_OFF_PAYLOAD_SIZE, h->payload_size);
    put_u64(out + HX_DISKCACHE_OFF_PAYLOAD_SUM, h->payload_sum);
    put_u64(out + HX_DISKCACHE_OFF_HEADER_SUM, XXH3_64bits(out, HX_DISKCACHE_OFF_HEADER_SUM));
}

static void hdr_decode(const uint8_t in[HX_DISKCACHE_HEADER_SIZE], hdr *h) {
    memcpy(h->magic, in + HX_DISKCACHE_OFF_MAGIC, 8);
    h->version = get_u32(in + HX_DISKCACHE_OFF_VERSION);
    h->header_size = get_u32(in + HX_DISKCACHE_OFF_HEADER_SIZE);
    h->n_tokens = (int32_t)get_u32(in + HX_DISKCACHE_OFF_N_TOKENS);
    h->reserved = get_u32(in + HX_DISKCACHE_OFF_RESERVED);
    h->fp = get_u64(in + HX_DISKCACHE_OFF_FINGERPRINT);
    h->ph[0] = get_u64(in + HX_DISKCACHE_OFF_PREFIX_HASH);
    h->ph[1] = get_u64(in + HX_DISKCACHE_OFF_PREFIX_HASH + 8);
    h->payload_size = get_u64(in + HX_DISKCACHE_OFF_PAYLOAD_SIZE);
    h->payload_sum = get_u64(in + HX_DISKCACHE_OFF_PAYLOAD_SUM);
    h->header_sum = get_u64(in + HX_DISKCACHE_OFF_HEADER_SUM);
}

/* Checks a raw header against itself, the file's size and its name.
 * Returns NULL when valid, else the name of the first failing field. */
static const char *hdr_check(const uint8_t raw[HX_DISKCACHE_HEADER_SIZE], const hdr *h,
                             uint64_t file_size, const char *file_name) {
    if (XXH3_64bits(raw, HX_DISKCACHE_OFF_HEADER_SUM) != h->header_sum) return "header checksum";
    if (memcmp(h->magic, HX_DISKCACHE_MAGIC, 8) != 0) return "magic";
    if (h->version != HX_DISKCACHE_VERSION) return "version";
    if (h->header_size != HX_DISKCACHE_HEADER_SIZE) return "header size";
    if (h->n_tokens <= 0) return "n_tokens";
    if (h->reserved != 0) return "reserved";
    if (h->payload_size > UINT64_MAX - HX_DISKCACHE_HEADER_SIZE ||
        h->payload_size + HX_DISKCACHE_HEADER_SIZE != file_size)
        return "payload size";
    uint64_t key[2];
    char name[40];
    key_of(h->ph, h->fp, h->n_tokens, key);
    name_of(key, name);
    if (strcmp(name, file_name) != 0) return "key (fingerprint, prefix hash or n_tokens)";
    return NULL;
}

// ----------------------------------------------------------------------------
// The handle and its in-memory index

typedef struct entry {
    uint64_t key[2], ph[2], fp;
    uint64_t file_bytes, payload_bytes;
    int64_t  stamp;  /* LRU: larger is more recent; also the file's mtime (ns) */
    int32_t  n_tokens;
    char     name[40];
} entry;

struct hx_diskcache {
    char   *dir;
    int     dirfd;
    int64_t budget;
    int64_t bytes;       /* sum of e[i].file_bytes */
    entry  *e;           /* (n) unordered */
    size_t  n, cap;
    int64_t last_stamp;
    int64_t qseq;        /* next quarantine suffix to try */
    int64_t tseq;        /* next temp file suffix */
    hx_diskcache_stats st;
    char    last_quarantine[160];  /* "NAME: reason" of the latest quarantine */
};

static int64_t next_stamp(hx_diskcache *dc) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    dc->last_stamp = now > dc->last_stamp ? now : dc->last_stamp + 1;
    return dc->last_stamp;
}

static void stamp_to_ts(int64_t s, struct timespec ts[2]) {
    ts[0].tv_sec = (time_t)(s / 1000000000LL);
    ts[0].tv_nsec = (long)(s % 1000000000LL);
    ts[1] = ts[0];
}

static ssize_t find_key(const hx_diskcache *dc, const uint64_t key[2]) {
    for (size_t i = 0; i < dc->n; i++)
        if (dc->e[i].key[0] == key[0] && dc->e[i].key[1] == key[1]) return (ssize_t)i;
    return -1;
}

static int index_add(hx_diskcache *dc, const entry *x) {
    if (dc->n == dc->cap) {
        size_t cap = dc->cap ? dc->cap * 2 : 64;
        entry *p = realloc(dc->e, cap * sizeof *p);
        if (!p) return ENG_ERR_NOMEM;
        dc->e = p;
        dc->cap = cap;
    }
    dc->e[dc->n++] = *x;
    dc->bytes += (int64_t)x->file_bytes;
    return ENG_OK;
}

static void index_remove(hx_diskcache *dc, size_t i) {
    dc->bytes -= (int64_t)dc->e[i].file_bytes;
    dc->e[i] = dc->e[--dc->n];
}

/* Moves DIR/name to DIR/quarantine/name.corrupt-<n> (never over another
 * file there, which another process may have just put; deleting it when the
 * move fails), counts it and remembers why. The caller drops it from the
 * index. */
static void quarantine(hx_diskcache *dc, const char *name, const char *why) {
    dc->st.quarantined++;
    snprintf(dc->last_quarantine, sizeof dc->last_quarantine, "%s: %s", name, why);
    if (mkdirat(dc->dirfd, HX_DISKCACHE_QUARANTINE, 0755) != 0 && errno != EEXIST) {
        unlinkat(dc->dirfd, name, 0);
        return;
    }
    char dst[128];
    for (int tries = 0; tries < 1000; tries++, dc->qseq++) {
        snprintf(dst, sizeof dst, "%s/%s.corrupt-%lld", HX_DISKCACHE_QUARANTINE, name, (long long)dc->qseq);
        if (renameat2(dc->dirfd, name, dc->dirfd, dst, RENAME_NOREPLACE) == 0) {
            dc->qseq++;
            return;
        }
        if (errno == EEXIST) continue;
        if (errno == EINVAL || errno == ENOSYS) {  /* no RENAME_NOREPLACE here: check, then rename */
            if (faccessat(dc->dirfd, dst, F_OK, 0) == 0) continue;
            if (renameat(dc->dirfd, name, dc->dirfd, dst) == 0) {
                dc->qseq++;
                return;
            }
        }
        break;
    }
    unlinkat(dc->dirfd, name, 0);
}

/* Deletes the least recently used entry. Returns ENG_OK or ENG_ERR_IO. */
static int evict_one(hx_diskcache *dc, char *err, size_t errlen) {
    ENG_ASSERT(dc->n > 0);
    size_t lru = 0;
    for (size_t i = 1; i < dc->n; i++)
        if (dc->e[i].stamp < dc->e[lru].stamp) lru = i;
    if (unlinkat(dc->dirfd, dc->e[lru].name, 0) != 0 && errno != ENOENT) {
        eng_errf(err, errlen, "%s/%s: cannot evict: %s", dc->dir, dc->e[lru].name,
                 strerror(errno));
        return ENG_ERR_IO;
    }
    dc->st.evictions++;
    dc->st.bytes_evicted += (int64_t)dc->e[lru].file_bytes;
    index_remove(dc, lru);
    return ENG_OK;
}

static int evict_until(hx_diskcache *dc, int64_t room, char *err, size_t errlen) {
    while (dc->n > 0 && dc->bytes + room > dc->budget) {
        int rc = evict_one(dc, err, errlen);
        if (rc != ENG_OK) return rc;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Open and close

static int mkdir_p(const char *dir) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

static bool is_entry_name(const char *s) {
    if (strlen(s) != 35 || strcmp(s + 32, ".kv") != 0) return false;
    for (int i = 0; i < 32; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* Reads exactly n bytes at off; returns bytes read (< n on EOF) or -1. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Indexes one *.kv file found at open; quarantines it when its header is
 * invalid. Returns ENG_OK (indexed, quarantined or vanished) or an error. */
static int scan_file(hx_diskcache *dc, const char *name, char *err, size_t errlen) {
    int fd = openat(dc->dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return ENG_OK;
        eng_errf(err, errlen, "%s/%s: cannot open: %s", dc->dir, name, strerror(errno));
        return ENG_ERR_IO;
    }
    struct stat sb;
    uint8_t raw[HX_DISKCACHE_HEADER_SIZE];
    int rc = ENG_OK;
    if (fstat(fd, &sb) != 0) {
        eng_errf(err, errlen, "%s/%s: cannot stat: %s", dc->dir, name, strerror(errno));
        rc = ENG_ERR_IO;
        goto out;
    }
    ssize_t got = pread_full(fd, raw, sizeof raw, 0);
    if (got < 0) {
        eng_errf(err, errlen, "%s/%s: cannot read: %s", dc->dir, name, strerror(errno));
        rc = ENG_ERR_IO;
        goto out;
    }
    hdr h;
    hdr_decode(raw, &h);
    const char *bad = got < (ssize_t)sizeof raw ? "shorter than a header" : hdr_check(raw, &h, (uint64_t)sb.st_size, name);
    if (bad) {
        quarantine(dc, name, bad);
        goto out;
    }
    entry x = {.fp = h.fp, .file_bytes = (uint64_t)sb.st_size, .payload_bytes = h.payload_size,
               .stamp = (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec,
               .n_tokens = h.n_tokens};
    x.ph[0] = h.ph[0];
    x.ph[1] = h.ph[1];
    key_of(x.ph, x.fp, x.n_tokens, x.key);
    memcpy(x.name, name, 36);  // is_entry_name: 35 characters and the NUL
    if (x.stamp > dc->last_stamp) dc->last_stamp = x.stamp;
    rc = index_add(dc, &x);
    if (rc != ENG_OK) eng_errf(err, errlen, "%s: out of memory indexing %s", dc->dir, name);
out:
    close(fd);
    return rc;
}

/* Deletes the temp file nm when no writer holds it. A store keeps its temp
 * file locked (flock LOCK_EX) from creation to rename, so a lock taken here
 * means its writer is gone (crashed or killed); a lock refused means a write
 * in flight, in this or another process, which is left alone. The inode
 * locked must still be the one named nm (not renamed meanwhile). */
static bool remove_stale_tmp(hx_diskcache *dc, const char *nm) {
    int fd = openat(dc->dirfd, nm, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    bool removed = false;
    struct stat a, b;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 &&
        fstatat(dc->dirfd, nm, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        removed = unlinkat(dc->dirfd, nm, 0) == 0;
    close(fd);  /* releases the lock */
    return removed;
}

int hx_diskcache_open(const char *dir, int64_t budget_bytes, hx_diskcache **out,
                      char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!dir || !*dir || !out || budget_bytes <= 0) {
        eng_errf(err, errlen, "%s: budget_bytes: must be > 0 with a directory and an out handle",
                 dir ? dir : "(null)");
        return ENG_ERR_ARG;
    }
    int rc = ENG_OK;
    DIR *d = NULL;
    hx_diskcache *dc = calloc(1, sizeof *dc);
    if (!dc || !(dc->dir = strdup(dir))) {
        eng_errf(err, errlen, "%s: out of memory", dir);
        rc = ENG_ERR_NOMEM;
        goto fail;
    }
    dc->dirfd = -1;
    dc->budget = budget_bytes;
    if (mkdir_p(dir) != 0 ||
        (dc->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        eng_errf(err, errlen, "%s: cannot create or open the cache directory: %s", dir,
                 strerror(errno));
        rc = ENG_ERR_IO;
        goto fail;
    }
    int fd2 = dup(dc->dirfd);
    if (fd2 < 0 || !(d = fdopendir(fd2))) {
        if (fd2 >= 0) close(fd2);
        eng_errf(err, errlen, "%s: cannot list: %s", dir, strerror(errno));
        rc = ENG_ERR_IO;
        goto fail;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (strstr(nm, ".kv.tmp.")) {
            if (remove_stale_tmp(dc, nm)) dc->st.temps_removed++;
            continue;
        }
        if (!is_entry_name(nm)) continue;
        struct stat sb;
        if (fstatat(dc->dirfd, nm, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        rc = scan_file(dc, nm, err, errlen);
        if (rc != ENG_OK) goto fail;
    }
    closedir(d);
    d = NULL;
    rc = evict_until(dc, 0, err, errlen);
    if (rc != ENG_OK) goto fail;
    *out = dc;
    return ENG_OK;
fail:
    if (d) closedir(d);
    hx_diskcache_close(dc);
    return rc;
}

void hx_diskcache_close(hx_diskcache *dc) {
    if (!dc) return;
    if (dc->dirfd >= 0) close(dc->dirfd);
    free(dc->e);
    free(dc->dir);
    free(dc);
}

// ----------------------------------------------------------------------------
// Store: temp file, fsync, rename, fsync of the directory

/* Creates this handle's own temp file for x (DIR/<name>.tmp.<pid>.<n>,
 * O_EXCL so it is nobody else's) and locks it (flock LOCK_EX) for the whole
 * write: hx_diskcache_open in any process deletes only unlocked temp files.
 * Returns the open fd (tmp gets its name), or -1 with err set. */
static int create_tmp(hx_diskcache *dc, const entry *x, char *tmp, size_t len, char *err, size_t errlen) {
    for (int tries = 0; tries < 100; tries++) {
        snprintf(tmp, len, "%s.tmp.%ld.%lld", x->name, (long)getpid(), (long long)dc->tseq++);
        int fd = openat(dc->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            break;
        }
        /* an open elsewhere may have locked it between our create and this lock, and deleted it */
        struct stat a, b;
        if (flock(fd, LOCK_EX) == 0 && fstat(fd, &a) == 0 &&
            fstatat(dc->dirfd, tmp, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return fd;
        close(fd);
    }
    eng_errf(err, errlen, "%s/%s: cannot create: %s", dc->dir, tmp, strerror(errno));
    return -1;
}

/* Writes the first max_bytes of header + payload into the locked temp file
 * fd, stamps its mtime and fsyncs it. On failure deletes it and closes fd. */
static int write_tmp(hx_diskcache *dc, int fd, const char *tmp, const uint8_t *head, const void *payload,
                     size_t payload_size, size_t max_bytes, int64_t stamp, char *err, size_t errlen) {
    size_t nh = max_bytes < HX_DISKCACHE_HEADER_SIZE ? max_bytes : HX_DISKCACHE_HEADER_SIZE;
    size_t left = max_bytes - nh;
    size_t np = left < payload_size ? left : payload_size;
    struct timespec ts[2];
    stamp_to_ts(stamp, ts);
    if (eng_write_all(fd, head, nh) != 0 || (np && eng_write_all(fd, payload, np) != 0) ||
        futimens(fd, ts) != 0 || fsync(fd) != 0) {
        eng_errf(err, errlen, "%s/%s: write failed: %s", dc->dir, tmp, strerror(errno));
        unlinkat(dc->dirfd, tmp, 0);
        close(fd);
        return ENG_ERR_IO;
    }
    return ENG_OK;
}

/* Fills the header and entry for a store; returns ENG_OK or ENG_ERR_ARG. */
static int prepare(const hx_diskcache *dc, uint64_t fp, const int32_t *tokens, int32_t n_tokens,
                   const void *payload, size_t payload_size, uint8_t head[HX_DISKCACHE_HEADER_SIZE],
                   entry *x, char *err, size_t errlen) {
    if (!dc || !tokens || n_tokens <= 0 || (!payload && payload_size > 0)) {
        eng_errf(err, errlen, "%s: n_tokens: need tokens, n_tokens > 0 and a payload",
                 dc ? dc->dir : "diskcache");
        return ENG_ERR_ARG;
    }
    memset(x, 0, sizeof *x);
    hx_diskcache_key(fp, tokens, n_tokens, x->ph, x->key, x->name);
    x->fp = fp;
    x->n_tokens = n_tokens;
    x->payload_bytes = payload_size;
    x->file_bytes = (uint64_t)payload_size + HX_DISKCACHE_HEADER_SIZE;
    hdr h = {.version = HX_DISKCACHE_VERSION, .header_size = HX_DISKCACHE_HEADER_SIZE,
             .n_tokens = n_tokens, .fp = fp, .ph = {x->ph[0], x->ph[1]},
             .payload_size = payload_size,
             .payload_sum = XXH3_64bits(payload_size ? payload : "", payload_size)};
    memcpy(h.magic, HX_DISKCACHE_MAGIC, 8);
    hdr_encode(&h, head);
    return ENG_OK;
}

int hx_diskcache_store(hx_diskcache *dc, uint64_t fingerprint, const int32_t *tokens,
                       int32_t n_tokens, const void *payload, size_t payload_size,
                       size_t *bytes_written, char *err, size_t errlen) {
    if (bytes_written) *bytes_written = 0;
    uint8_t head[HX_DISKCACHE_HEADER_SIZE];
    entry x;
    int rc = prepare(dc, fingerprint, tokens, n_tokens, payload, payload_size, head, &x, err,
                     errlen);
    if (rc != ENG_OK) return rc;

    ssize_t have = find_key(dc, x.key);
    if (have >= 0) {
        struct timespec ts[2];
        int64_t s = next_stamp(dc);
        stamp_to_ts(s, ts);
        if (utimensat(dc->dirfd, x.name, ts, 0) == 0 || errno != ENOENT) {
            dc->e[have].stamp = s;
            dc->st.stores_present++;
            return HX_DISKCACHE_PRESENT;
        }
        index_remove(dc, (size_t)have);  // vanished behind our back: write it again
    }
    if (x.file_bytes > (uint64_t)dc->budget) {
        dc->st.stores_too_large++;
        return HX_DISKCACHE_OVER_BUDGET;
    }
    rc = evict_until(dc, (int64_t)x.file_bytes, err, errlen);
    if (rc != ENG_OK) return rc;

    char tmp[96];
    int fd = create_tmp(dc, &x, tmp, sizeof tmp, err, errlen);
    if (fd < 0) return ENG_ERR_IO;
    x.stamp = next_stamp(dc);
    rc = write_tmp(dc, fd, tmp, head, payload, payload_size, SIZE_MAX, x.stamp, err, errlen);
    if (rc != ENG_OK) return rc;
    if (renameat(dc->dirfd, tmp, dc->dirfd, x.name) != 0) {
        eng_errf(err, errlen, "%s/%s: rename failed: %s", dc->dir, x.name, strerror(errno));
        unlinkat(dc->dirfd, tmp, 0);
        close(fd);
        return ENG_ERR_IO;
    }
    close(fd);  /* the lock ends with the temp name */
    if (fsync(dc->dirfd) != 0) {
        eng_errf(err, errlen, "%s: directory fsync failed: %s", dc->dir, strerror(errno));
        unlinkat(dc->dirfd, x.name, 0);
        return ENG_ERR_IO;
    }
    rc = index_add(dc, &x);
    if (rc != ENG_OK) {
        unlinkat(dc->dirfd, x.name, 0);
        eng_errf(err, errlen, "%s: out of memory", dc->dir);
        return rc;
    }
    dc->st.stores++;
    dc->st.bytes_written += (int64_t)x.file_bytes;
    if (bytes_written) *bytes_written = (size_t)x.file_bytes;
    return HX_DISKCACHE_STORED;
}

int hx_diskcache_write_tmp_only(hx_diskcache *dc, uint64_t fingerprint, const int32_t *tokens,
                                int32_t n_tokens, const void *payload, size_t payload_size,
                                size_t max_bytes, char *tmp_path, size_t tmp_path_len,
                                char *err, size_t errlen) {
    uint8_t head[HX_DISKCACHE_HEADER_SIZE];
    entry x;
    int rc = prepare(dc, fingerprint, tokens, n_tokens, payload, payload_size, head, &x, err,
                     errlen);
    if (rc != ENG_OK) return rc;
    char tmp[96];
    int fd = create_tmp(dc, &x, tmp, sizeof tmp, err, errlen);
    if (fd < 0) return ENG_ERR_IO;
    if (tmp_path && tmp_path_len) snprintf(tmp_path, tmp_path_len, "%s/%s", dc->dir, tmp);
    rc = write_tmp(dc, fd, tmp, head, payload, payload_size, max_bytes, next_stamp(dc), err, errlen);
    if (rc == ENG_OK) close(fd);  /* the crash: the writer is gone, its lock too */
    return rc;
}

// ----------------------------------------------------------------------------
// Lookup: hash the prompt once, try matches longest first, verify fully

enum { LOAD_OK, LOAD_CORRUPT, LOAD_VANISHED };

/* Reads and verifies x's file. On LOAD_OK *payload is malloc'd; on
 * LOAD_CORRUPT *why names the failed check. Returns a LOAD_* value, or a
 * negative status for I/O failures and allocation. */
static int load_verify(hx_diskcache *dc, const entry *x, void **payload, const char **why, char *err,
                       size_t errlen) {
    *payload = NULL;
    *why = NULL;
    int fd = openat(dc->dirfd, x->name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return LOAD_VANISHED;
        eng_errf(err, errlen, "%s/%s: cannot open: %s", dc->dir, x->name, strerror(errno));
        return ENG_ERR_IO;
    }
    int rc = LOAD_CORRUPT;
    void *buf = NULL;
    struct stat sb;
    uint8_t raw[HX_DISKCACHE_HEADER_SIZE];
    if (fstat(fd, &sb) != 0) {
        eng_errf(err, errlen, "%s/%s: cannot stat: %s", dc->dir, x->name, strerror(errno));
        rc = ENG_ERR_IO;
        goto out;
    }
    ssize_t got = pread_full(fd, raw, sizeof raw, 0);
    if (got < 0) goto io;
    dc->st.bytes_read += got;
    *why = "shorter than a header";
    if (got < (ssize_t)sizeof raw) goto out;
    hdr h;
    hdr_decode(raw, &h);
    if ((*why = hdr_check(raw, &h, (uint64_t)sb.st_size, x->name))) goto out;
    *why = "header differs from the index";
    if (h.n_tokens != x->n_tokens || h.fp != x->fp || h.ph[0] != x->ph[0] ||
        h.ph[1] != x->ph[1] || h.payload_size != x->payload_bytes)
        goto out;
    *why = "payload size";
    if (h.payload_size > SIZE_MAX - 1) goto out;
    buf = malloc(h.payload_size ? (size_t)h.payload_size : 1);
    if (!buf) {
        eng_errf(err, errlen, "%s/%s: out of memory for %llu payload bytes", dc->dir, x->name,
                 (unsigned long long)h.payload_size);
        rc = ENG_ERR_NOMEM;
        goto out;
    }
    got = pread_full(fd, buf, (size_t)h.payload_size, HX_DISKCACHE_HEADER_SIZE);
    if (got < 0) goto io;
    dc->st.bytes_read += got;
    *why = "truncated payload";
    if ((uint64_t)got != h.payload_size) goto out;
    *why = "payload checksum";
    if (XXH3_64bits(buf, (size_t)h.payload_size) != h.payload_sum) goto out;
    *why = NULL;
    *payload = buf;
    buf = NULL;
    rc = LOAD_OK;
    goto out;
io:
    eng_errf(err, errlen, "%s/%s: read failed: %s", dc->dir, x->name, strerror(errno));
    rc = ENG_ERR_IO;
out:
    free(buf);
    close(fd);
    return rc;
}

typedef struct cand {
    int32_t n;
    size_t  i;
} cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return (x->n > y->n) - (x->n < y->n);
}

void hx_diskcache_hit_free(hx_diskcache_hit *hit) {
    if (!hit) return;
    free(hit->payload);
    memset(hit, 0, sizeof *hit);
}

int hx_diskcache_lookup(hx_diskcache *dc, uint64_t fingerprint, const int32_t *prompt,
                        int32_t n_prompt, int32_t max_tokens, hx_diskcache_hit *hit,
                        char *err, size_t errlen) {
    return hx_diskcache_lookup_checked(dc, fingerprint, prompt, n_prompt, max_tokens, NULL, NULL, hit, err,
                                       errlen);
}

int hx_diskcache_lookup_checked(hx_diskcache *dc, uint64_t fingerprint, const int32_t *prompt,
                                int32_t n_prompt, int32_t max_tokens, hx_diskcache_check check,
                                void *ctx, hx_diskcache_hit *hit, char *err, size_t errlen) {
    if (hit) memset(hit, 0, sizeof *hit);
    if (!dc || !hit || n_prompt < 0 || (!prompt && n_prompt > 0)) {
        eng_errf(err, errlen, "%s: n_prompt: need a handle, a hit and a prompt",
                 dc ? dc->dir : "diskcache");
        return ENG_ERR_ARG;
    }
    dc->st.lookups++;
    int32_t max = max_tokens < n_prompt ? max_tokens : n_prompt;
    int rc = ENG_OK;
    cand *c = NULL;
    uint64_t (*match)[2] = NULL;  /* keys of the matching entries, ascending length */
    size_t nc = 0, nm = 0;
    if (max > 0 && dc->n > 0) {
        c = malloc(dc->n * sizeof *c);
        match = malloc(dc->n * sizeof *match);
        if (!c || !match) {
            eng_errf(err, errlen, "%s: out of memory", dc->dir);
            rc = ENG_ERR_NOMEM;
            goto out;
        }
    }
    for (size_t i = 0; max > 0 && i < dc->n; i++)
        if (dc->e[i].fp == fingerprint && dc->e[i].n_tokens <= max)
            c[nc++] = (cand){dc->e[i].n_tokens, i};
    if (nc > 0) {
        qsort(c, nc, sizeof *c, cand_cmp);
        XXH3_state_t *st = XXH3_createState();
        if (!st) {
            eng_errf(err, errlen, "%s: out of memory", dc->dir);
            rc = ENG_ERR_NOMEM;
            goto out;
        }
        XXH3_128bits_reset(st);
        int32_t pos = 0;
        for (size_t j = 0; j < nc;) {
            int32_t n = c[j].n;
            hash_tokens(st, prompt, pos, n);
            pos = n;
            XXH128_hash_t h = XXH3_128bits_digest(st);
            uint64_t ph[2] = {h.low64, h.high64}, key[2];
            key_of(ph, fingerprint, n, key);
            for (; j < nc && c[j].n == n; j++) {
                const entry *x = &dc->e[c[j].i];
                if (x->key[0] == key[0] && x->key[1] == key[1]) {
                    match[nm][0] = key[0];
                    match[nm][1] = key[1];
                    nm++;
                }
            }
        }
        XXH3_freeState(st);
    }
    bool fell_back = false;
    while (nm > 0) {
        ssize_t i = find_key(dc, match[--nm]);
        if (i < 0) continue;
        void *payload = NULL;
        const char *why = NULL;
        int lr = load_verify(dc, &dc->e[i], &payload, &why, err, errlen);
        if (lr < 0) {
            rc = lr;
            goto out;
        }
        if (lr == LOAD_OK && check && (why = check(ctx, payload, (size_t)dc->e[i].payload_bytes,
                                                   dc->e[i].n_tokens))) {
            free(payload);  /* sound file, unusable payload: the caller's check failed */
            lr = LOAD_CORRUPT;
        }
        if (lr == LOAD_OK) {
            entry *x = &dc->e[i];
            hit->n_tokens = x->n_tokens;
            hit->payload = payload;
            hit->payload_size = (size_t)x->payload_bytes;
            x->stamp = next_stamp(dc);
            struct timespec ts[2];
            stamp_to_ts(x->stamp, ts);
            utimensat(dc->dirfd, x->name, ts, 0);  // best effort: the in-memory order rules
            dc->st.hits++;
            if (fell_back) dc->st.fallbacks++;
            goto out;
        }
        if (lr == LOAD_CORRUPT) quarantine(dc, dc->e[i].name, why ? why : "invalid");
        index_remove(dc, (size_t)i);
        fell_back = true;
    }
    dc->st.misses++;
out:
    free(c);
    free(match);
    return rc;
}

// ----------------------------------------------------------------------------
// Introspection

bool hx_diskcache_contains(const hx_diskcache *dc, uint64_t fingerprint, const int32_t *tokens,
                           int32_t n_tokens) {
    if (!dc || !tokens || n_tokens <= 0) return false;
    uint64_t key[2];
    hx_diskcache_key(fingerprint, tokens, n_tokens, NULL, key, NULL);
    return find_key(dc, key) >= 0;
}

hx_diskcache_stats hx_diskcache_get_stats(const hx_diskcache *dc) {
    hx_diskcache_stats s = {0};
    if (!dc) return s;
    s = dc->st;
    s.entries = (int64_t)dc->n;
    s.bytes_on_disk = dc->bytes;
    s.budget_bytes = dc->budget;
    return s;
}

static int entry_lru_cmp(const void *a, const void *b) {
    const hx_diskcache_entry *x = a, *y = b;
    if (x->last_use_ns != y->last_use_ns) return x->last_use_ns < y->last_use_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

int hx_diskcache_list(const hx_diskcache *dc, hx_diskcache_entry **out, size_t *n_out) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!dc || !out || !n_out) return ENG_ERR_ARG;
    if (dc->n == 0) return ENG_OK;
    hx_diskcache_entry *v = calloc(dc->n, sizeof *v);
    if (!v) return ENG_ERR_NOMEM;
    for (size_t i = 0; i < dc->n; i++) {
        const entry *x = &dc->e[i];
        snprintf(v[i].name, sizeof v[i].name, "%s", x->name);
        v[i].n_tokens = x->n_tokens;
        v[i].fingerprint = x->fp;
        v[i].prefix_hash_lo = x->ph[0];
        v[i].prefix_hash_hi = x->ph[1];
        v[i].file_bytes = x->file_bytes;
        v[i].payload_bytes = x->payload_bytes;
        v[i].last_use_ns = x->stamp;
    }
    qsort(v, dc->n, sizeof *v, entry_lru_cmp);
    *out = v;
    *n_out = dc->n;
    return ENG_OK;
}

const char *hx_diskcache_dir(const hx_diskcache *dc) { return dc ? dc->dir : NULL; }

const char *hx_diskcache_last_quarantine(const hx_diskcache *dc) {
    return dc && dc->last_quarantine[0] ? dc->last_quarantine : NULL;
}
