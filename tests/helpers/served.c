/* tests/helpers/served.c: see served.h. */
#include "served.h"
#include "runcli.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int served_start(served *sv, const char *dir, const char *name, const char *const *args) {
    memset(sv, 0, sizeof *sv);
    sv->pid = -1;
    snprintf(sv->dir, sizeof sv->dir, "%s", dir);
    snprintf(sv->log, sizeof sv->log, "%s/%s.log", dir, name);
    snprintf(sv->db, sizeof sv->db, "%s/%s.sqlite", dir, name);
    char portf[192];
    snprintf(portf, sizeof portf, "%s/%s.port", dir, name);
    unlink(portf);
    const char *bin = kvr_bin();
    if (!bin) return -1;
    char *argv[96];
    int n = 0;
    argv[n++] = "kvreplay";
    argv[n++] = "serve";
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--port-file";
    argv[n++] = portf;
    argv[n++] = "--db";
    argv[n++] = sv->db;
    for (int i = 0; args && args[i] && n < 94; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(sv->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 2); dup2(fd, 1); close(fd); }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) { dup2(nul, 0); close(nul); }
        execv(bin, argv);
        _exit(127);
    }
    sv->pid = pid;
    for (double t0 = now_s(); now_s() - t0 < 30;) {
        FILE *f = fopen(portf, "r");
        if (f) {
            int p = 0;
            bool ok = fscanf(f, "%d", &p) == 1 && p > 0;
            fclose(f);
            if (ok) { sv->port = p; return 0; }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { sv->pid = -1; return -1; }
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    sv->pid = -1;
    return -1;
}

int served_stop(served *sv) {
    if (sv->pid <= 0) return -1;
    kill(sv->pid, SIGTERM);
    int st = 0;
    for (double t0 = now_s(); now_s() - t0 < 60; usleep(10000)) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            sv->pid = -1;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
    }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, NULL, 0);
    sv->pid = -1;
    return -1;
}

bool served_log_has(const served *sv, const char *text) {
    FILE *f = fopen(sv->log, "r");
    if (!f) return false;
    char line[8192];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

typedef struct sink { http_resp *r; double t0; size_t cap; } sink;

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    sink *s = ud;
    size_t n = sz * nm;
    if (s->r->n == 0 && s->r->t_first == 0) s->r->t_first = now_s() - s->t0;
    if (s->r->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->r->n + n + 1) cap *= 2;
        char *b = realloc(s->r->body, cap);
        if (!b) return 0;
        s->r->body = b;
        s->cap = cap;
    }
    memcpy(s->r->body + s->r->n, p, n);
    s->r->n += n;
    s->r->body[s->r->n] = '\0';
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    http_resp *r = ud;
    size_t n = sz * nm, have = strlen(r->headers);
    if (have + n + 1 < sizeof r->headers) {
        memcpy(r->headers + have, p, n);
        r->headers[have + n] = '\0';
    }
    return n;
}

void http_do(const served *sv, const char *method, const char *path, const char *body, const char *const *headers,
             double timeout_s, http_resp *r) {
    static bool inited;
    if (!inited) { curl_global_init(CURL_GLOBAL_DEFAULT); inited = true; }
    memset(r, 0, sizeof *r);
    CURL *c = curl_easy_init();
    if (!c) { snprintf(r->curl_error, sizeof r->curl_error, "curl_easy_init"); return; }
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", sv->port, path);
    sink s = {r, now_s(), 0};
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    for (int i = 0; headers && headers[i]; i++) h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(1000 * (timeout_s > 0 ? timeout_s : 120)));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    else snprintf(r->curl_error, sizeof r->curl_error, "%s", curl_easy_strerror(rc));
    r->t_total = now_s() - s.t0;
    if (!r->body) r->body = calloc(1, 1);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

void http_free(http_resp *r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

bool http_header(const http_resp *r, const char *name, char *buf, size_t cap) {
    size_t n = strlen(name);
    for (const char *p = r->headers; p && *p;) {
        const char *e = strstr(p, "\r\n");
        if (!e) e = p + strlen(p);
        if ((size_t)(e - p) > n + 1 && !strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ') v++;
            snprintf(buf, cap, "%.*s", (int)(e - v), v);
            return true;
        }
        p = *e ? e + 2 : e;
    }
    return false;
}

int raw_connect(const served *sv) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
    return fd;
}

char *raw_read_all(int fd, double timeout_s, size_t *n) {
    size_t cap = 4096;
    char *b = malloc(cap);
    *n = 0;
    double t0 = now_s();
    while (b && now_s() - t0 < timeout_s) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        if (*n + 1024 + 1 > cap) { cap *= 2; char *x = realloc(b, cap); if (!x) break; b = x; }
        ssize_t k = read(fd, b + *n, 1024);
        if (k <= 0) break;
        *n += (size_t)k;
    }
    if (b) b[*n] = '\0';
    return b;
}

long proc_rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}
