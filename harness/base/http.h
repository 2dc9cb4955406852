/*
 * harness/base/http.h: the harness's one HTTP client (probe against a live
 * server, bench --serve, experiments and tests against kvreplay serve):
 * libcurl's easy interface, one connection kept alive for the whole run,
 * every byte of a response handed to the caller as it arrives (so an SSE
 * stream is parsed while it streams, and the time of each piece is known).
 *
 * What can go wrong with a server is one of hx_http_fail, with curl's own
 * message: a connection refused, no byte for idle_s (a server that hangs,
 * also mid-stream), the whole exchange over timeout_s, a body cut before
 * its end (the peer closed the connection mid-response), a body over
 * max_body. A status >= 400 is not a transport failure: the body is there
 * for the dialect's error reader. Nothing here retries.
 *
 * Times are milliseconds on CLOCK_MONOTONIC from the moment the request is
 * handed to curl; pretransfer_ms is when the request could start being
 * sent (connection set up), so a time to first byte or first token is
 * (t - pretransfer_ms), without the connection's setup.
 */
#ifndef HX_HTTP_H
#define HX_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum hx_http_fail {
    HX_HTTP_OK = 0,
    HX_HTTP_REFUSED,    /* could not connect (refused, unreachable, no such host) */
    HX_HTTP_TIMEOUT,    /* no byte for idle_s, or the exchange took over timeout_s */
    HX_HTTP_CUT,        /* the connection closed before the response ended */
    HX_HTTP_TOO_LARGE,  /* the body is over max_body */
    HX_HTTP_ABORTED,    /* the caller's sink asked to stop */
    HX_HTTP_OTHER,      /* anything else curl reports (curl's message says what) */
} hx_http_fail;

const char *hx_http_fail_name(hx_http_fail f);  /* "ok", "refused", "timeout", "cut", ... */

typedef struct hx_http_opts {
    double      connect_s;   /* default 10 */
    double      timeout_s;   /* the whole exchange; default 600 */
    double      idle_s;      /* no byte for this long: a timeout; default 60 */
    size_t      max_body;    /* default 1 GiB */
    const char *api_key;     /* sent as "Authorization: Bearer" and "x-api-key"; NULL: none */
    const char *const *headers;  /* more "Name: value" lines, NULL-terminated, or NULL */
} hx_http_opts;

void hx_http_opts_default(hx_http_opts *o);

typedef struct hx_http_resp {
    long         status;          /* HTTP status, 0 when none arrived */
    eng_buf      body;            /* the body (also when it went to a sink) */
    eng_buf      headers;         /* the response's header lines as received ("Name: value\r\n"...) */
    char         content_type[128];
    char         retry_after[32]; /* the Retry-After header, "" when absent */
    hx_http_fail fail;
    char         message[320];    /* what failed, one line ("" when fail is OK) */
    double       pretransfer_ms;  /* connection set up, request about to be sent */
    double       first_byte_ms;   /* first byte of the body (-1: none) */
    double       total_ms;
} hx_http_resp;

void hx_http_resp_free(hx_http_resp *r);
/* The value of header name in r (case-insensitive) into buf; false when absent. */
bool hx_http_header(const hx_http_resp *r, const char *name, char *buf, size_t cap);

/* Called with each piece of the body as it arrives, t_ms its arrival time;
 * a nonzero return aborts the exchange (fail = HX_HTTP_ABORTED). */
typedef int (*hx_http_sink)(void *ud, const char *bytes, size_t n, double t_ms);

typedef struct hx_http hx_http;

/* base_url: "http://host:port" (a trailing "/" is dropped; a path prefix
 * such as "http://host/api" is kept and prepended to every path). NULL on
 * OOM or when curl cannot start. o NULL: defaults. */
hx_http *hx_http_new(const char *base_url, const hx_http_opts *o);
void     hx_http_free(hx_http *h);
const char *hx_http_base(const hx_http *h);

/* One exchange: method ("GET", "POST"), path (with its query), a JSON body
 * (NULL: none). sink may be NULL. Fills r (initialized here); returns
 * ENG_OK when a response arrived whole (any status), ENG_ERR_IO when
 * r->fail says what went wrong, ENG_ERR_NOMEM. */
int hx_http_do(hx_http *h, const char *method, const char *path, const char *body, size_t n, hx_http_sink sink,
               void *ud, hx_http_resp *r);

#endif /* HX_HTTP_H */
