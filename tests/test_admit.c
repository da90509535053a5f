/* SPDX-License-Identifier: BSD-3-Clause */
/* test_admit.c -- the admission rule of each lock kind, alone (admit.c). */
#include <criterion/criterion.h>

#include "admit.h"
#include "dlock.h"

static const struct admit_ask EXCL = {LOCK_EXCLUSIVE, 0};
static const struct admit_ask SHARED = {LOCK_SHARED, 0};
static const struct admit_ask SEM2 = {LOCK_SEMAPHORE, 2};
static const struct admit_ask SEM3 = {LOCK_SEMAPHORE, 3};

static struct admit_held held(uint32_t n, struct admit_ask as, bool can_join)
{
    return (struct admit_held){
        .nholders = n, .kind = as.kind, .permits = as.permits, .can_join = can_join};
}

Test(admit, a_free_lock_sends_every_kind_to_the_store)
{
    struct admit_held none = {0};
    cr_assert_eq(admit_first(&none, &EXCL), ADMIT_STORE);
    cr_assert_eq(admit_first(&none, &SHARED), ADMIT_STORE);
    cr_assert_eq(admit_first(&none, &SEM2), ADMIT_STORE);
}

Test(admit, an_exclusive_request_waits_for_any_holder_and_every_kind_waits_for_it)
{
    struct admit_held h = held(1, EXCL, false);
    cr_assert_eq(admit_first(&h, &EXCL), ADMIT_WAIT);
    cr_assert_eq(admit_first(&h, &SHARED), ADMIT_WAIT);
    cr_assert_eq(admit_first(&h, &SEM2), ADMIT_WAIT);
    struct admit_held r = held(3, SHARED, true), s = held(1, SEM2, false);
    cr_assert_eq(admit_first(&r, &EXCL), ADMIT_WAIT);
    cr_assert_eq(admit_first(&s, &EXCL), ADMIT_WAIT);
}

Test(admit, readers_join_readers_while_their_grant_may_take_one_more_else_ask_the_store)
{
    struct admit_held open = held(2, SHARED, true), closed = held(2, SHARED, false);
    cr_assert_eq(admit_first(&open, &SHARED), ADMIT_JOIN);
    cr_assert_eq(admit_first(&closed, &SHARED), ADMIT_STORE);
}

Test(admit, a_semaphore_goes_to_the_store_below_its_count_and_waits_at_it)
{
    struct admit_held one = held(1, SEM2, false), two = held(2, SEM2, false);
    cr_assert_eq(admit_first(&one, &SEM2), ADMIT_STORE);
    cr_assert_eq(admit_first(&two, &SEM2), ADMIT_WAIT);
}

Test(admit, counted_kinds_with_another_kind_or_count_clash)
{
    struct admit_held r = held(1, SHARED, true), s = held(1, SEM2, false);
    cr_assert_eq(admit_first(&r, &SEM2), ADMIT_CLASH);
    cr_assert_eq(admit_first(&s, &SHARED), ADMIT_CLASH);
    cr_assert_eq(admit_first(&s, &SEM3), ADMIT_CLASH);
    cr_assert(admit_compatible(&EXCL, &SHARED));
    cr_assert(admit_compatible(&SEM2, &EXCL));
    cr_assert(admit_compatible(&SEM2, &SEM2));
    cr_assert(admit_compatible(&SHARED, &SHARED));
    cr_assert_not(admit_compatible(&SEM2, &SEM3));
    cr_assert_not(admit_compatible(&SHARED, &SEM2));
}

Test(admit, malformed_asks_are_dlock_einval_with_a_reason)
{
    const char *why = NULL;
    cr_assert_eq(admit_check(&EXCL, &why), 0);
    cr_assert_eq(admit_check(&SHARED, &why), 0);
    cr_assert_eq(admit_check(&SEM2, &why), 0);
    struct admit_ask zero = {LOCK_SEMAPHORE, 0}, counted = {LOCK_SHARED, 4},
                     unknown = {(enum lock_kind)7, 0};
    cr_assert_eq(admit_check(&zero, &why), DLOCK_EINVAL);
    cr_assert_not_null(why);
    why = NULL;
    cr_assert_eq(admit_check(&counted, &why), DLOCK_EINVAL);
    cr_assert_not_null(why);
    why = NULL;
    cr_assert_eq(admit_check(&unknown, &why), DLOCK_EINVAL);
    cr_assert_not_null(why);
}
