/* harness/base/child.c: `kvreplay serve` as a child process (see child.h). */
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "status.h"
#include "util.h"

#define ARGS_MAX 120

static int read_port(const char *path) {
    FILE *f = fopen(path, "r");
    int port = 0;
    if (!f) return 0;
    if (fscanf(f, "%d", &port) != 1 || port <= 0) port = 0;
    fclose(f);
    return port;
}

int hx_serve_child_start(const char *bin, const char *const *args, const char *log, double wait_s, hx_serve_child *c,
                         char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    snprintf(c->log, sizeof c->log, "%s", log);
    char pf[1100];
    snprintf(pf, sizeof pf, "%s.port", log);
    unlink(pf);
    const char *argv[ARGS_MAX + 8];
    int k = 0;
    const char *exe = bin ? bin : "/proc/self/exe";
    argv[k++] = "kvreplay";
    argv[k++] = "serve";
    for (int i = 0; args && args[i]; i++) {
        if (k >= ARGS_MAX) return eng_errf(err, errlen, "kvreplay serve: more than %d arguments", ARGS_MAX), ENG_ERR_ARG;
        argv[k++] = args[i];
    }
    argv[k++] = "--listen";
    argv[k++] = "127.0.0.1:0";
    argv[k++] = "--port-file";
    argv[k++] = pf;
    argv[k] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return eng_errf(err, errlen, "cannot start kvreplay serve: %s", strerror(errno)), ENG_ERR_IO;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0), close(nul);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    c->pid = pid;
    for (double t0 = eng_now_s(); eng_now_s() - t0 < wait_s; usleep(20000)) {
        if ((c->port = read_port(pf)) > 0) return ENG_OK;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            c->pid = 0;
            eng_errf(err, errlen, "kvreplay serve ended before it listened (exit %d; its log: %s)",
                     WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), log);
            return ENG_ERR_IO;
        }
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    c->pid = 0;
    eng_errf(err, errlen, "kvreplay serve did not listen within %g s (its log: %s)", wait_s, log);
    return ENG_ERR_IO;
}

int hx_serve_child_stop(hx_serve_child *c, double grace_s) {
    if (c->pid <= 0) return -1;
    kill(c->pid, SIGTERM);
    int st = 0;
    for (double t0 = eng_now_s(); eng_now_s() - t0 < grace_s; usleep(10000))
        if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
            c->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
    kill(c->pid, SIGKILL);
    waitpid(c->pid, &st, 0);
    c->pid = 0;
    return 128 + SIGKILL;
}
