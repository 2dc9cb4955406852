/* tests/helpers/served.c: see served.h. */
#include "served.h"
#include "runcli.h"

#include "child.h"
#include "http.h"
#include "status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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

/* The servers started and not yet stopped: a failing assertion leaves its test without
 * reaching served_stop, and served_kill_all (a group teardown, and at exit) ends them. */
#define LIVE_MAX 64
static pid_t g_live[LIVE_MAX];

static void live_set(pid_t old, pid_t now) {
    for (int i = 0; i < LIVE_MAX; i++)
        if (g_live[i] == old) { g_live[i] = now; return; }
}

void served_kill_all(void) {
    for (int i = 0; i < LIVE_MAX; i++)
        if (g_live[i] > 0) {
            kill(g_live[i], SIGKILL);
            waitpid(g_live[i], NULL, 0);
            g_live[i] = 0;
        }
}

int served_start(served *sv, const char *dir, const char *name, const char *const *args) {
    static bool registered;
    if (!registered) registered = atexit(served_kill_all) == 0;
    memset(sv, 0, sizeof *sv);
    sv->pid = -1;
    snprintf(sv->dir, sizeof sv->dir, "%s", dir);
    snprintf(sv->log, sizeof sv->log, "%s/%s.log", dir, name);
    snprintf(sv->db, sizeof sv->db, "%s/%s.sqlite", dir, name);
    const char *bin = kvr_bin();
    if (!bin) return -1;
    const char *argv[96];
    int n = 0;
    argv[n++] = "--db";
    argv[n++] = sv->db;
    for (int i = 0; args && args[i] && n < 94; i++) argv[n++] = args[i];
    argv[n] = NULL;
    hx_serve_child c;
    char err[1200];
    if (hx_serve_child_start(bin, argv, sv->log, 30, &c, err, sizeof err) != ENG_OK) return -1;
    sv->pid = c.pid;
    sv->port = c.port;
    live_set(0, c.pid);
    return 0;
}

int served_stop(served *sv) {
    if (sv->pid <= 0) return -1;
    hx_serve_child c = {.pid = sv->pid, .port = sv->port};
    int code = hx_serve_child_stop(&c, 60);
    live_set(sv->pid, 0);
    sv->pid = -1;
    return code == 128 + SIGKILL ? -1 : code;
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

void http_do(const served *sv, const char *method, const char *path, const char *body, const char *const *headers,
             double timeout_s, http_resp *r) {
    memset(r, 0, sizeof *r);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", sv->port);
    hx_http_opts o;
    hx_http_opts_default(&o);
    o.timeout_s = o.idle_s = timeout_s > 0 ? timeout_s : 120;
    o.headers = headers;
    hx_http *h = hx_http_new(url, &o);
    if (!h) { snprintf(r->curl_error, sizeof r->curl_error, "cannot start libcurl"); return; }
    hx_http_resp hr;
    int rc = hx_http_do(h, method, path, body, body ? strlen(body) : 0, NULL, NULL, &hr);
    if (rc == ENG_OK) r->status = hr.status;
    else snprintf(r->curl_error, sizeof r->curl_error, "%.250s", hr.message[0] ? hr.message : "out of memory");
    r->n = hr.body.len;
    r->body = malloc(r->n + 1);
    if (r->body) {
        if (r->n) memcpy(r->body, hr.body.data, r->n);
        r->body[r->n] = '\0';
    }
    snprintf(r->headers, sizeof r->headers, "%.*s", (int)hr.headers.len, hr.headers.data ? hr.headers.data : "");
    r->t_first = hr.first_byte_ms >= 0 ? hr.first_byte_ms / 1e3 : 0;
    r->t_total = hr.total_ms / 1e3;
    hx_http_resp_free(&hr);
    hx_http_free(h);
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

typedef struct load_client { const served *sv; int id, n_requests, n_predict; bool started; served_load got; } load_client;

static void *load_thread(void *arg) {
    load_client *c = arg;
    for (int i = 0; i < c->n_requests; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time, %d met %d\",\"n_predict\":%d}", c->id, i,
                 c->n_predict);
        http_resp r;
        http_do(c->sv, "POST", "/completion", body, NULL, 120, &r);
        if (r.status == 200) c->got.ok++;
        else if (r.status == 503) c->got.refused++;
        else c->got.other++;
        http_free(&r);
    }
    return NULL;
}

served_load served_load_run(const served *sv, int n_clients, int n_requests, int n_predict) {
    served_load all = {0};
    load_client *cl = calloc((size_t)n_clients, sizeof *cl);
    pthread_t *t = calloc((size_t)n_clients, sizeof *t);
    if (!cl || !t) {
        free(cl);
        free(t);
        all.other = n_clients * n_requests;
        return all;
    }
    for (int i = 0; i < n_clients; i++) {
        cl[i] = (load_client){.sv = sv, .id = i, .n_requests = n_requests, .n_predict = n_predict};
        cl[i].started = pthread_create(&t[i], NULL, load_thread, &cl[i]) == 0;
        if (!cl[i].started) cl[i].got.other = n_requests;
    }
    for (int i = 0; i < n_clients; i++) {
        if (cl[i].started) pthread_join(t[i], NULL);
        all.ok += cl[i].got.ok;
        all.refused += cl[i].got.refused;
        all.other += cl[i].got.other;
    }
    free(cl);
    free(t);
    return all;
}
