/*
 * harness/base/http.c: the HTTP client on libcurl's easy interface (see
 * http.h). One easy handle per hx_http: curl keeps its
 * connection alive between requests, so a measured time never includes a
 * TCP handshake after the first request.
 */
#include "http.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "status.h"

struct hx_http {
    CURL        *curl;
    char        *base;
    hx_http_opts o;
    char       **headers;  /* copies of o.headers */
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc = CURLE_OK;
static void global_init(void) { g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

const char *hx_http_fail_name(hx_http_fail f) {
    switch (f) {
    case HX_HTTP_OK:        return "ok";
    case HX_HTTP_REFUSED:   return "refused";
    case HX_HTTP_TIMEOUT:   return "timeout";
    case HX_HTTP_CUT:       return "cut";
    case HX_HTTP_TOO_LARGE: return "too_large";
    case HX_HTTP_ABORTED:   return "aborted";
    case HX_HTTP_OTHER:     return "transport";
    }
    return "?";
}

void hx_http_opts_default(hx_http_opts *o) {
    memset(o, 0, sizeof *o);
    o->connect_s = 10;
    o->timeout_s = 600;
    o->idle_s = 60;
    o->max_body = (size_t)1 << 30;
}

void hx_http_resp_free(hx_http_resp *r) {
    if (!r) return;
    eng_buf_free(&r->body);
    eng_buf_free(&r->headers);
    memset(r, 0, sizeof *r);
}

bool hx_http_header(const hx_http_resp *r, const char *name, char *buf, size_t cap) {
    size_t n = strlen(name);
    const char *p = r->headers.data, *end = p ? p + r->headers.len : NULL;
    while (p && p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        if ((size_t)(e - p) > n && !strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1, *w = e;
            while (v < w && (*v == ' ' || *v == '\t')) v++;
            while (w > v && (w[-1] == '\r' || w[-1] == ' ')) w--;
            snprintf(buf, cap, "%.*s", (int)(w - v), v);
            return true;
        }
        p = e + 1;
    }
    return false;
}

hx_http *hx_http_new(const char *base_url, const hx_http_opts *o) {
    pthread_once(&g_once, global_init);
    if (g_init_rc != CURLE_OK || !base_url) return NULL;
    hx_http *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    if (o) h->o = *o;
    else hx_http_opts_default(&h->o);
    h->curl = curl_easy_init();
    h->base = strdup(base_url);
    size_t n = h->base ? strlen(h->base) : 0;
    while (n > 0 && h->base[n - 1] == '/') h->base[--n] = '\0';
    size_t k = 0;
    while (o && o->headers && o->headers[k]) k++;
    h->headers = calloc(k + 1, sizeof *h->headers);
    bool bad = !h->curl || !h->base || !h->headers;
    for (size_t i = 0; !bad && i < k; i++) bad = !(h->headers[i] = strdup(o->headers[i]));
    h->o.headers = NULL;
    if (bad) {
        hx_http_free(h);
        return NULL;
    }
    return h;
}

void hx_http_free(hx_http *h) {
    if (!h) return;
    if (h->curl) curl_easy_cleanup(h->curl);
    for (size_t i = 0; h->headers && h->headers[i]; i++) free(h->headers[i]);
    free(h->headers);
    free(h->base);
    free(h);
}

const char *hx_http_base(const hx_http *h) { return h->base; }

typedef struct xfer {
    const hx_http *h;
    hx_http_resp  *r;
    hx_http_sink   sink;
    void          *ud;
    double         t0, t_last;  /* the request's start, the last byte's arrival (s) */
    bool           too_large, aborted, oom, idle;
} xfer;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    x->t_last = eng_now_s();
    double t = (x->t_last - x->t0) * 1e3;
    if (x->r->first_byte_ms < 0 && n > 0) x->r->first_byte_ms = t;
    if (x->r->body.len + n > x->h->o.max_body) {
        x->too_large = true;
        return 0;
    }
    if (eng_buf_append(&x->r->body, p, n)) {
        x->oom = true;
        return 0;
    }
    if (x->sink && x->sink(x->ud, p, n, t)) {
        x->aborted = true;
        return 0;
    }
    return n;
}

/* "Name: value\r\n" -> value into out when the name matches (case-insensitive). */
static void header_value(const char *line, size_t n, const char *name, char *out, size_t cap) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) || line[k] != ':') return;
    const char *v = line + k + 1;
    size_t m = n - k - 1;
    while (m && (*v == ' ' || *v == '\t')) v++, m--;
    while (m && (v[m - 1] == '\r' || v[m - 1] == '\n' || v[m - 1] == ' ')) m--;
    snprintf(out, cap, "%.*s", (int)m, v);
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    if (!strncmp(p, "HTTP/", 5)) x->r->headers.len = 0;  /* a new response (after a 100 or a redirect) */
    if (eng_buf_append(&x->r->headers, p, n)) {
        x->oom = true;
        return 0;
    }
    header_value(p, n, "Content-Type", x->r->content_type, sizeof x->r->content_type);
    header_value(p, n, "Retry-After", x->r->retry_after, sizeof x->r->retry_after);
    return n;
}

/* No byte for idle_s: curl's low-speed limit averages over several seconds, so a server that bursts
 * and then goes silent would be waited for far longer; this checks the last byte's time instead. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    xfer *x = ud;
    if (eng_now_s() - x->t_last <= x->h->o.idle_s) return 0;
    x->idle = true;
    return 1;
}

static hx_http_fail fail_of(CURLcode rc, const xfer *x) {
    switch (rc) {
    case CURLE_OK: return HX_HTTP_OK;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return HX_HTTP_REFUSED;
    case CURLE_OPERATION_TIMEDOUT: return HX_HTTP_TIMEOUT;
    case CURLE_ABORTED_BY_CALLBACK: return x->idle ? HX_HTTP_TIMEOUT : HX_HTTP_OTHER;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING: return HX_HTTP_CUT;
    case CURLE_WRITE_ERROR: return x->too_large ? HX_HTTP_TOO_LARGE : x->aborted ? HX_HTTP_ABORTED : HX_HTTP_OTHER;
    default: return HX_HTTP_OTHER;
    }
}

int hx_http_do(hx_http *h, const char *method, const char *path, const char *body, size_t n, hx_http_sink sink,
               void *ud, hx_http_resp *r) {
    memset(r, 0, sizeof *r);
    r->first_byte_ms = -1;
    char url[2048];
    snprintf(url, sizeof url, "%s%s%s", h->base, path[0] == '/' ? "" : "/", path);
    struct curl_slist *hl = NULL, *t;
    char auth[600], key[600];
#define ADD(s) do { if (!(t = curl_slist_append(hl, (s)))) goto oom; hl = t; } while (0)
    if (body) ADD("Content-Type: application/json");
    ADD("Expect:");  /* no 100-continue round trip before a large body */
    if (h->o.api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", h->o.api_key);
        snprintf(key, sizeof key, "x-api-key: %s", h->o.api_key);
        ADD(auth);
        ADD(key);
    }
    for (size_t i = 0; h->headers[i]; i++) ADD(h->headers[i]);
#undef ADD
    CURL *c = h->curl;
    curl_easy_reset(c);  /* options only: the connection stays in the cache */
    xfer x = {.h = h, .r = r, .sink = sink, .ud = ud};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(h->o.connect_s * 1e3));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(h->o.timeout_s * 1e3));
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "identity");
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    } else if (!strcmp(method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    if (strcmp(method, "GET") && strcmp(method, "POST")) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    x.t0 = x.t_last = eng_now_s();
    CURLcode rc = curl_easy_perform(c);
    r->total_ms = (eng_now_s() - x.t0) * 1e3;
    curl_off_t pre = 0;
    if (curl_easy_getinfo(c, CURLINFO_PRETRANSFER_TIME_T, &pre) == CURLE_OK) r->pretransfer_ms = (double)pre / 1e3;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hl);
    if (x.oom) return ENG_ERR_NOMEM;
    r->fail = fail_of(rc, &x);
    if (r->fail == HX_HTTP_OK) return ENG_OK;
    if (r->fail == HX_HTTP_TOO_LARGE)
        snprintf(r->message, sizeof r->message, "the response body is over %zu bytes", h->o.max_body);
    else if (r->fail == HX_HTTP_TIMEOUT && x.idle)
        snprintf(r->message, sizeof r->message, "the server sent nothing for %g s (%zu bytes received)", h->o.idle_s,
                 r->body.len);
    else if (r->fail == HX_HTTP_TIMEOUT)
        snprintf(r->message, sizeof r->message, "no complete response within %g s (%s)", h->o.timeout_s, errbuf);
    else
        snprintf(r->message, sizeof r->message, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    return ENG_ERR_IO;
oom:
    curl_slist_free_all(hl);
    return ENG_ERR_NOMEM;
}
