/* SPDX-License-Identifier: BSD-3-Clause */
/* slow_nss.c -- a preloadable shim for the tests that makes user and group
 * look-ups slow, as a name service (LDAP, NIS) on a bad day: while the file
 * named by $DLOCK_TEST_NSS_DELAY_FILE exists, getpwnam() and getgrnam()
 * first sleep for $DLOCK_TEST_NSS_DELAY_MS milliseconds. */
#include <dlfcn.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void maybe_stall(void)
{
    const char *file = getenv("DLOCK_TEST_NSS_DELAY_FILE");
    const char *ms = getenv("DLOCK_TEST_NSS_DELAY_MS");
    if (!file || !ms || access(file, F_OK) != 0)
        return;
    long v = strtol(ms, NULL, 10);
    struct timespec ts = {.tv_sec = v / 1000, .tv_nsec = (v % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

struct passwd *getpwnam(const char *name)
{
    struct passwd *(*real)(const char *) =
        (struct passwd * (*)(const char *)) dlsym(RTLD_NEXT, "getpwnam");
    maybe_stall();
    return real(name);
}

struct group *getgrnam(const char *name)
{
    struct group *(*real)(const char *) =
        (struct group * (*)(const char *)) dlsym(RTLD_NEXT, "getgrnam");
    maybe_stall();
    return real(name);
}
