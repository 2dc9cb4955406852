/*
 * tests/test_util.c: atomic writes and the growable buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "util.h"

static void atomic_write_replaces_the_file_and_leaves_no_temp(void **state) {
    (void)state;
    char dir[] = "/tmp/kvr_util_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/f.bin", dir);
    assert_int_equal(eng_write_atomic(path, "old", 3, NULL, 0), ENG_OK);
    assert_int_equal(eng_write_atomic(path, "new!", 4, NULL, 0), ENG_OK);
    char *buf; size_t n;
    assert_int_equal(eng_read_file(path, &buf, &n, NULL, 0), ENG_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "new!", 4);
    free(buf);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    assert_int_not_equal(access(tmp, F_OK), 0);
    unlink(path);
    rmdir(dir);
}

static void atomic_write_into_a_missing_directory_fails_with_io_error(void **state) {
    (void)state;
    char err[256] = "";
    assert_int_equal(eng_write_atomic("/nonexistent-dir/x/y", "a", 1, err, sizeof err), ENG_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent-dir/x/y"));
}

/* A path that is not a regular file is refused and left as it was: a rename over /dev/null
 * once replaced the device by a regular file (`logits -o /dev/null`). */
static void atomic_write_refuses_what_is_not_a_regular_file(void **state) {
    (void)state;
    char dir[] = "/tmp/kvr-util-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[256], file[256], link[256], err[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(file, sizeof file, "%s/file", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(eng_write_atomic(file, "keep", 4, NULL, 0), ENG_OK);
    assert_int_equal(symlink(file, link), 0);
    const char *paths[] = {fifo, link, dir};
    const char *says[] = {"a FIFO", "a symbolic link", "a directory"};
    for (int i = 0; i < 3; i++) {
        err[0] = '\0';
        assert_int_equal(eng_write_atomic(paths[i], "new", 3, err, sizeof err), ENG_ERR_ARG);
        assert_non_null(strstr(err, says[i]));
        assert_non_null(strstr(err, paths[i]));
    }
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *buf; size_t n;
    assert_int_equal(eng_read_file(file, &buf, &n, NULL, 0), ENG_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "keep", 4);
    free(buf);
    unlink(link); unlink(file); unlink(fifo); rmdir(dir);
}

static void buffer_grows_and_stays_terminated(void **state) {
    (void)state;
    eng_buf b = {0};
    for (int i = 0; i < 1000; i++) assert_int_equal(eng_buf_printf(&b, "%d,", i), ENG_OK);
    assert_int_equal(b.data[b.len], '\0');
    assert_true(strncmp(b.data, "0,1,2,", 6) == 0);
    assert_non_null(strstr(b.data, ",999,"));
    eng_buf_free(&b);
    eng_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(atomic_write_replaces_the_file_and_leaves_no_temp),
        cmocka_unit_test(atomic_write_into_a_missing_directory_fails_with_io_error),
        cmocka_unit_test(atomic_write_refuses_what_is_not_a_regular_file),
        cmocka_unit_test(buffer_grows_and_stays_terminated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
