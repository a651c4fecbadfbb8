/*
 * tests/test_argmax.c: sd_argmax_checked (runtime/base), the one checked argmax of logits
 * rows that the LLM draft, greedy verification (chains and trees) and the model's fused
 * eval share: the largest entry, the lowest index on ties, -1 when any entry is NaN
 * (wherever it is), infinities ordered as numbers.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "runtime/base/sd_base.h"

Test(argmax, largest_lowest_on_ties_and_nan_anywhere) {
    const float one[1] = {-3.0f};
    cr_assert_eq(sd_argmax_checked(one, 1), 0);
    const float row[6] = {1.0f, 4.0f, -2.0f, 4.0f, 3.5f, 4.0f};
    cr_assert_eq(sd_argmax_checked(row, 6), 1, "ties go to the lowest index");
    cr_assert_eq(sd_argmax_checked(row, 1), 0, "only the first n entries count");
    const float inf[4] = {-INFINITY, 2.0f, INFINITY, INFINITY};
    cr_assert_eq(sd_argmax_checked(inf, 4), 2);
    const float all_neg_inf[3] = {-INFINITY, -INFINITY, -INFINITY};
    cr_assert_eq(sd_argmax_checked(all_neg_inf, 3), 0);
    for (int at = 0; at < 6; at++) {
        float r[6] = {1.0f, 4.0f, -2.0f, 4.0f, 3.5f, 4.0f};
        r[at] = NAN;
        cr_assert_eq(sd_argmax_checked(r, 6), -1, "a NaN at %d", at);
    }
}
