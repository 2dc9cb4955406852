/*
 * tests/test_demo_full.c: `make demo SCALE=full` (experiments/demo.sh full)
 * resumes where it stopped.
 *
 * Two small specs (SPEC_DIR), three units in two lanes, at full scale into a
 * scratch FULL_DIR: the demo is stopped (SIGTERM) while a unit is half
 * replayed; no process of it may outlive it; the same command then completes
 * every unit, and the databases hold, row for row, what an uninterrupted
 * `kvreplay experiment --scale full` gives (tests/helpers/same-rows.sh:
 * timing and host columns aside). A third run finds everything complete and
 * adds nothing. Without a terminal the demo says only its last line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixtures.h"
#include "proc.h"
#include "runcli.h"
#include "sqlq.h"

static char g_dir[128], g_model[192], g_tr[192], g_out[8192];

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_demofull") != 0) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_tr, sizeof g_tr, "%s/long.jsonl", g_dir);
    if (fx_tiny_model(g_model, 9) != 0) return -1;
    return fx_transcript(g_tr, HX_SYNTH_STATIC, 8, 12, 4000);
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

static void write_spec(const char *name, const char *runs) {
    char path[256];
    snprintf(path, sizeof path, "%s/specs/%s.json", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"name\": \"%s\", \"models\": {\"m\": {\"path\": \"%s\"}}, \"transcripts\": {\"l\": {\"path\": \"%s\"}},\n"
               " \"runs\": [%s]}\n", name, g_model, g_tr, runs);
    fclose(f);
}

/* The demo's environment: its specs, databases, caches and calibration in the scratch directory. */
static void demo_env(const char *full) {
    char v[256];
    snprintf(v, sizeof v, "%s/specs", g_dir);
    setenv("SPEC_DIR", v, 1);
    setenv("FULL_DIR", full, 1);
    unsetenv("LOG_DIR");
    snprintf(v, sizeof v, "%s/cache", g_dir);
    setenv("CACHE_ROOT", v, 1);
    snprintf(v, sizeof v, "%s/calibration.json", g_dir);
    setenv("CALIBRATION", v, 1);
    setenv("EXPERIMENTS", "x y", 1);
    setenv("NO_RENDER", "1", 1);
    setenv("LANES", "2", 1);
    setenv("PROGRESS_S", "1", 1);
}

static pid_t demo_spawn(int errfd) {
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        if (errfd >= 0) dup2(errfd, 2);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(nul, 1);
        execlp("sh", "sh", "experiments/demo.sh", kvr_bin(), "full", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int demo_wait(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs the demo to its end: its exit code; its stderr in g_out. */
static int demo_run(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/demo.err", g_dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    int rc = demo_wait(demo_spawn(fd));
    close(fd);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(g_out, 1, sizeof g_out - 1, f) : 0;
    g_out[n] = '\0';
    if (f) fclose(f);
    return rc;
}

/* Processes whose command line names the scratch directory (this test's only). */
static int ours_alive(void) {
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char p[300], buf[4096];
        snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        size_t m = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < m; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[m] = '\0';
        if (strstr(buf, g_dir) && strstr(buf, "experiment")) n++;
    }
    if (d) closedir(d);
    return n;
}

static int same_rows(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sh tests/helpers/same-rows.sh '%s' '%s' > '%s/same-rows.out' 2>&1", a, b, g_dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void a_stopped_full_demo_resumes_to_the_uninterrupted_rows(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    if (system("command -v sqlite3 >/dev/null && command -v setsid >/dev/null") != 0) {
        fprintf(stderr, "test_demo_full: skipped: sqlite3 or setsid absent\n");
        skip();
    }
    char d[256], full[256], ref[256], db[300], refdb[300];
    snprintf(d, sizeof d, "%s/specs", g_dir);
    assert_int_equal(mkdir(d, 0755), 0);
    /* x: two units long enough to be stopped in the middle (twelve turns of 4 KB, 60 decode steps each); y: one */
    write_spec("x", "{\"variant\": \"c${chunk}\", \"model\": \"m\", \"transcript\": \"l\", \"sweep\": {\"name\": "
                    "\"chunk\", \"values\": [32, 64]}, \"args\": [\"--chunk\", \"${chunk}\", \"--decode\", \"60\"]}");
    write_spec("y", "{\"variant\": \"radix\", \"model\": \"m\", \"transcript\": \"l\", \"args\": [\"--policy\", "
                    "\"radix\", \"--decode\", \"60\"]}");
    snprintf(full, sizeof full, "%s/full", g_dir);
    snprintf(ref, sizeof ref, "%s/ref", g_dir);
    demo_env(full);

    /* stopped while x is half replayed */
    snprintf(db, sizeof db, "%s/x.sqlite", full);
    pid_t pid = demo_spawn(-1);
    assert_true(pid > 0);
    int64_t n = db_wait_at_least(db, "select count(*) from requests", 3);
    kill(pid, SIGTERM);
    assert_int_equal(demo_wait(pid), 130);
    assert_true(n >= 3);
    int alive = 1;
    for (int i = 0; i < 200 && (alive = ours_alive()); i++) usleep(50000);
    assert_int_equal(alive, 0);  /* its lanes' experiments stopped with it */
    assert_true(q_int(db, "select count(*) from requests") < 24);

    /* the same command completes every unit, quietly */
    assert_int_equal(demo_run(), 0);
    assert_int_equal(strncmp(g_out, "demo: full scale done", 21), 0);  /* its one line: no terminal */
    int lines = 0;
    for (const char *c = g_out; *c; c++) lines += *c == '\n';
    if (lines != 1) print_error("%s", g_out);
    assert_int_equal(lines, 1);
    assert_int_equal(q_int(db, "select count(*) from runs where status = 'done'"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests"), 24);
    assert_true(q_int(db, "select sum(resumes) from runs") >= 1);
    char ydb[300];
    snprintf(ydb, sizeof ydb, "%s/y.sqlite", full);
    assert_int_equal(q_int(ydb, "select count(*) from requests"), 12);

    /* the rows of an uninterrupted run */
    assert_int_equal(mkdir(ref, 0755), 0);
    snprintf(refdb, sizeof refdb, "%s/x.sqlite", ref);
    char spec[300], cal[300], cache[300];
    snprintf(spec, sizeof spec, "%s/specs/x.json", g_dir);
    snprintf(cal, sizeof cal, "%s/calibration.json", g_dir);
    snprintf(cache, sizeof cache, "%s/cache", g_dir);
    const char *args[] = {"experiment", spec, "--db", refdb, "--scale", "full", "--threads", "1", "--calibration", cal,
                          "--cache-root", cache, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, args), 0);
    assert_int_equal(same_rows(refdb, db), 0);

    /* complete: a third run adds nothing */
    assert_int_equal(demo_run(), 0);
    assert_int_equal(q_int(db, "select count(*) from runs"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests"), 24);
    assert_int_equal(q_int(ydb, "select count(*) from runs"), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_stopped_full_demo_resumes_to_the_uninterrupted_rows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
