/* tests/helpers/proc.c: see proc.h. */
#include "proc.h"
#include "runcli.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void exec_kvr(const char *const *args) {
    char *argv[64];
    int n = 0;
    argv[n++] = "kvreplay";
    for (; args[n - 1] && n < 63; n++) argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    const char *bin = kvr_bin();
    if (bin) execv(bin, argv);
    _exit(127);
}

static int exit_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 255;
}

int proc_run(const proc_opts *o, char *out, size_t out_cap, char *err, size_t err_cap, const char *const *args) {
    int po[2], pe[2], pi[2];
    if (pipe(po) || pipe(pe) || pipe(pi)) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(pi[0], 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(pi[0]); close(pi[1]); close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
        if (o && o->fsize > 0) {
            struct rlimit r = {o->fsize, o->fsize};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &r);
        }
        if (o && o->uid >= 0 && geteuid() == 0) {
            if (setgroups(0, NULL) != 0 || setgid((gid_t)o->uid) != 0 || setuid((uid_t)o->uid) != 0) _exit(126);
        }
        exec_kvr(args);
    }
    close(pi[0]);
    close(po[1]);
    close(pe[1]);
    if (o && o->input) {
        signal(SIGPIPE, SIG_IGN);
        ssize_t w = write(pi[1], o->input, strlen(o->input));
        (void)w;
    }
    close(pi[1]);
    size_t no = 0, ne = 0;
    char sink[4096];
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int k = 0; k < 2; k++) {
            if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char *buf = k ? err : out;
            size_t cap = k ? err_cap : out_cap, *got = k ? &ne : &no;
            ssize_t r = buf && *got + 1 < cap ? read(fds[k].fd, buf + *got, cap - 1 - *got)
                                              : read(fds[k].fd, sink, sizeof sink);
            if (r > 0 && buf && *got + 1 < cap) *got += (size_t)r;
            if (r <= 0) {
                close(fds[k].fd);
                fds[k].fd = -1;
                open_fds--;
            }
        }
    }
    if (out && out_cap) out[no] = '\0';
    if (err && err_cap) err[ne] = '\0';
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return exit_code(st);
}

pid_t proc_spawn(const char *const *args) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_RDWR);
        if (fd >= 0) { dup2(fd, 0); dup2(fd, 1); dup2(fd, 2); }
        exec_kvr(args);
    }
    return pid;
}

int proc_wait(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return exit_code(st);
}

int64_t db_int_or(const char *db, const char *sql, int64_t dflt) {
    if (access(db, F_OK) != 0) return dflt;
    sqlite3 *h = NULL;
    int64_t v = dflt;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(h, 2000);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
            sqlite3_column_type(st, 0) != SQLITE_NULL)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(h);
    return v;
}

int64_t db_wait_at_least(const char *db, const char *sql, int64_t n) {
    int64_t v = -1;
    for (int i = 0; i < 12000 && (v = db_int_or(db, sql, -1)) < n; i++) usleep(5000);
    return v;
}
