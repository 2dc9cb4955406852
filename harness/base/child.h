/*
 * harness/base/child.h: `kvreplay serve` in a child process on an ephemeral
 * loopback port, for what drives a live server of its own: an experiment's
 * probe runs, `bench --serve`, the tests.
 *
 * The child is `BIN serve ARGS --listen 127.0.0.1:0 --port-file LOG.port`,
 * its stdout and stderr in LOG, its stdin /dev/null. serve writes the port
 * file once it listens (the model loaded, the worker running), so a port
 * read from it is a server that answers.
 */
#ifndef HX_CHILD_H
#define HX_CHILD_H

#include <sys/types.h>

typedef struct hx_serve_child {
    pid_t pid;        /* 0: not running */
    int   port;
    char  log[1024];  /* its stdout and stderr */
} hx_serve_child;

/* Starts the child (bin NULL: this program, /proc/self/exe; args: serve's
 * options, NULL-terminated) and waits at most wait_s for its port. ENG_OK;
 * ENG_ERR_IO with err naming the log when it cannot start, ends first or
 * does not listen in time (it is then killed); ENG_ERR_ARG for too many args. */
int hx_serve_child_start(const char *bin, const char *const *args, const char *log, double wait_s, hx_serve_child *c,
                         char *err, size_t errlen);
/* SIGTERM (serve finishes its request and exits 0), SIGKILL after grace_s.
 * Its exit code; 128 + the signal when killed by one; -1 when not running. */
int hx_serve_child_stop(hx_serve_child *c, double grace_s);

#endif /* HX_CHILD_H */
