/* A wall-clock shifter for test servers, preloaded with LD_PRELOAD.
 *
 * CLOCK_REALTIME (clock_gettime, gettimeofday, time) is moved by the signed number of
 * microseconds written in the file named by LOCKKIT_CLOCK_FILE, read again on every call, so a
 * test steps a running server's clock by rewriting that file. Monotonic clocks are untouched.
 *
 * libfaketime does the same but deadlocks at start-up in programs linked with jemalloc (as
 * Debian's redis-server is): jemalloc reads the clock while libfaketime initialises itself.
 * This shim makes raw system calls only, so it never allocates and never recurses.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long shift_us(void) {
    const char *path = getenv("LOCKKIT_CLOCK_FILE");
    char buf[64];
    long long value = 0;
    int negative = 0;
    long fd, n, i = 0;
    if (path == NULL) return 0;
    fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0) return 0;
    if (buf[0] == '-' || buf[0] == '+') { negative = buf[0] == '-'; i = 1; }
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) value = value * 10 + (buf[i] - '0');
    return negative ? -value : value;
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + shift_us() * 1000LL;
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0) return -1;
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    shift(&ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
