/*
 * tests/helpers/served.h: `kvreplay serve` in a child process on an
 * ephemeral loopback port, and the clients the tests talk to it with: HTTP
 * through libcurl (a status, the headers, the body), and a raw socket for
 * what a well-behaved client never sends (truncated and slow bodies).
 */
#ifndef KVR_TESTS_SERVED_H
#define KVR_TESTS_SERVED_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct served {
    pid_t pid;
    int   port;
    char  dir[160];    /* scratch directory of this server */
    char  log[192];    /* its stderr */
    char  db[192];     /* its --db */
} served;

/* Starts `kvreplay serve --listen 127.0.0.1:0 --port-file ... --db DIR/NAME.sqlite` plus args
 * (NULL-terminated) and waits until it listens (30 s at most). dir: an existing scratch
 * directory. 0, or -1 (the log says why). */
int  served_start(served *sv, const char *dir, const char *name, const char *const *args);
/* SIGTERM, then its exit code (128 + signal when killed; -1 when it did not end in 60 s). */
int  served_stop(served *sv);
/* SIGKILL to every server started and not stopped (a test that failed midway); also run at exit. */
void served_kill_all(void);
/* Whether the log holds text. */
bool served_log_has(const served *sv, const char *text);

typedef struct http_resp {
    long   status;      /* 0 when the request failed (curl_error says why) */
    char  *body;        /* NUL-terminated (n bytes) */
    size_t n;
    char   headers[8192];
    char   curl_error[256];
    double t_first;     /* seconds to the first body byte */
    double t_total;
} http_resp;

/* One request: method, path, body (NULL: none), extra headers (NULL-terminated "Name: value"
 * strings, or NULL). timeout_s caps it (0: 120 s). */
void http_do(const served *sv, const char *method, const char *path, const char *body, const char *const *headers,
             double timeout_s, http_resp *r);
void http_free(http_resp *r);
/* The value of header name in r (case-insensitive), copied into buf; false when absent. */
bool http_header(const http_resp *r, const char *name, char *buf, size_t cap);

/* A raw connection to the server (-1 on failure). */
int  raw_connect(const served *sv);
/* Reads what the server sends until it closes or timeout_s passes; returns the bytes (malloc'd). */
char *raw_read_all(int fd, double timeout_s, size_t *n);

/* n_clients concurrent clients, each sending n_requests llama-server /completion requests of
 * n_predict tokens one after another (a short distinct prompt each); the answers counted by
 * status: 200, 503 and anything else (a failure, a hang past 120 s). */
typedef struct served_load { int ok, refused, other; } served_load;
served_load served_load_run(const served *sv, int n_clients, int n_requests, int n_predict);

/* The resident set of a process, KiB (-1 when unknown). */
long proc_rss_kib(pid_t pid);

#endif
