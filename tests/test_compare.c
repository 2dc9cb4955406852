/*
 * tests/test_compare.c: the comparator's distance figures. Equality is
 * memcmp (tests/test_prefill.c plants a one-ULP flip); here the ULP
 * distance means what a reader expects, across the sign boundary too
 * (issue #14, docs/sqlite.md): the distance on the ordered integer line of
 * floats, where -0 and +0 are one point, so the smallest subnormals of
 * opposite signs are 2 apart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "compare.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void ulp_distance_counts_the_floats_between_on_one_line_through_zero(void **state) {
    (void)state;
    const float tiny = from_bits(1);  /* 1.4e-45, the smallest subnormal */
    assert_int_equal(hx_ulp_distance(1.0f, 1.0f), 0);
    assert_int_equal(hx_ulp_distance(1.0f, nextafterf(1.0f, 2.0f)), 1);
    assert_int_equal(hx_ulp_distance(-1.0f, nextafterf(-1.0f, -2.0f)), 1);
    assert_int_equal(hx_ulp_distance(0.0f, -0.0f), 0);     /* one point, though the bytes differ */
    assert_int_equal(hx_ulp_distance(tiny, 0.0f), 1);
    assert_int_equal(hx_ulp_distance(-tiny, 0.0f), 1);
    assert_int_equal(hx_ulp_distance(-tiny, -0.0f), 1);
    assert_int_equal(hx_ulp_distance(tiny, -tiny), 2);      /* 1e-45 and -1e-45 */
    assert_int_equal(hx_ulp_distance(-tiny, tiny), 2);
    /* across zero: the floats below |a| on one side plus those below |b| on the other */
    assert_int_equal(hx_ulp_distance(-1.0f, 1.0f), 2 * (uint64_t)0x3f800000u);
    assert_int_equal(hx_ulp_distance(-3e-6f, 4e-6f), (uint64_t)0x3649539cu + 0x368637bdu);  /* bit patterns */
    assert_int_equal(hx_ulp_distance(FLT_MAX, INFINITY), 1);
    assert_int_equal(hx_ulp_distance(-INFINITY, INFINITY), 2 * (uint64_t)0x7f800000u);
    /* symmetric, and the triangle through zero is exact */
    assert_int_equal(hx_ulp_distance(-2.5f, 7.0f), hx_ulp_distance(7.0f, -2.5f));
    assert_int_equal(hx_ulp_distance(-2.5f, 7.0f), hx_ulp_distance(-2.5f, 0.0f) + hx_ulp_distance(0.0f, 7.0f));
    /* NaN: identical bits are 0 apart, anything else is as far as it gets */
    const float nan1 = from_bits(0x7fc00001u);
    assert_int_equal(hx_ulp_distance(nan1, nan1), 0);
    assert_true(hx_ulp_distance(nan1, 1.0f) == UINT64_MAX);
    assert_true(hx_ulp_distance(from_bits(0x7fc00000u), nan1) == UINT64_MAX);
}

static void compare_logits_reports_equal_bytes_only_and_zero_ulp_for_signed_zeros(void **state) {
    (void)state;
    float a[4] = {1.0f, 0.0f, -2.0f, 3.0f}, b[4] = {1.0f, -0.0f, -2.0f, 3.0f};
    hx_cmp c;
    hx_compare_logits(a, b, 4, &c);
    assert_false(c.equal);                 /* memcmp decides: -0 is another bit pattern */
    assert_int_equal(c.first_diff, 1);
    assert_int_equal(c.ulp_first, 0);      /* but no float lies between them */
    assert_int_equal(c.max_ulp, 0);
    assert_true(c.max_abs == 0.0);
    b[3] = nextafterf(3.0f, 4.0f);
    hx_compare_logits(a, b, 4, &c);
    assert_int_equal(c.max_ulp, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ulp_distance_counts_the_floats_between_on_one_line_through_zero),
        cmocka_unit_test(compare_logits_reports_equal_bytes_only_and_zero_ulp_for_signed_zeros),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
