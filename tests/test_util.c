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
        cmocka_unit_test(buffer_grows_and_stays_terminated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
