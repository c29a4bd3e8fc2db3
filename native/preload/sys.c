/*
 * sys.c — raw system calls and tiny string helpers for the preload library.
 *
 * Shims must not touch stdio, errno-visible libc state or malloc, so the
 * writer talks to the kernel directly through these.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static inline long raw6(long n, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ __volatile__("syscall"
                         : "=a"(ret)
                         : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                         : "rcx", "r11", "memory");
    return ret;
}

/* Raw calls return -errno on failure and never touch the caller's errno. */
long mtlab_sys6(long n, long a, long b, long c, long d, long e, long f) { return raw6(n, a, b, c, d, e, f); }
long mtlab_sys_write(int fd, const void *p, size_t n) { return raw6(SYS_write, fd, (long)p, (long)n, 0, 0, 0); }
long mtlab_sys_pwrite(int fd, const void *p, size_t n, uint64_t off) {
    return raw6(SYS_pwrite64, fd, (long)p, (long)n, (long)off, 0, 0);
}
int mtlab_sys_ftruncate(int fd, uint64_t len) { return (int)raw6(SYS_ftruncate, fd, (long)len, 0, 0, 0, 0); }
int mtlab_sys_open(const char *path, int flags, int mode) {
    return (int)raw6(SYS_openat, AT_FDCWD, (long)path, flags, mode, 0, 0);
}
long mtlab_sys_read(int fd, void *p, size_t n) { return raw6(SYS_read, fd, (long)p, (long)n, 0, 0, 0); }
void mtlab_sys_sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    raw6(SYS_nanosleep, (long)&ts, 0, 0, 0, 0, 0);
}
int mtlab_sys_block_signals(uint64_t *old) {
    /* The system call, not glibc's sigprocmask, which keeps its cancel and
     * set-id signals deliverable: an asynchronous cancel is what must wait. */
    uint64_t all = ~0ull;
    return raw6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)old, 8, 0, 0) == 0;
}
void mtlab_sys_restore_signals(const uint64_t *old) { raw6(SYS_rt_sigprocmask, SIG_SETMASK, (long)old, 0, 8, 0, 0); }
int mtlab_sys_tgkill(uint32_t pid, uint32_t tid, int sig) { return (int)raw6(SYS_tgkill, pid, tid, sig, 0, 0, 0); }
int mtlab_sys_unlink(const char *path) { return (int)raw6(SYS_unlinkat, AT_FDCWD, (long)path, 0, 0, 0, 0); }
void mtlab_sys_close(int fd) { raw6(SYS_close, fd, 0, 0, 0, 0, 0); }
uint64_t mtlab_sys_max_rss_kib(void) {
    struct rusage ru;
    if (raw6(SYS_getrusage, RUSAGE_SELF, (long)&ru, 0, 0, 0, 0) != 0) return 0;
    return (uint64_t)ru.ru_maxrss;
}
int mtlab_sys_fcntl(int fd, int cmd, long arg) { return (int)raw6(SYS_fcntl, fd, cmd, arg, 0, 0, 0); }
int mtlab_sys_fstat(int fd, struct stat *st) { return (int)raw6(SYS_fstat, fd, (long)st, 0, 0, 0, 0); }
int mtlab_sys_lstat(const char *path, struct stat *st) {
    return (int)raw6(SYS_newfstatat, AT_FDCWD, (long)path, (long)st, AT_SYMLINK_NOFOLLOW, 0, 0);
}
uint32_t mtlab_sys_geteuid(void) { return (uint32_t)raw6(SYS_geteuid, 0, 0, 0, 0, 0, 0); }
int mtlab_sys_getrlimit(int res, struct rlimit *rl) { return (int)raw6(SYS_prlimit64, 0, res, 0, (long)rl, 0, 0); }
int mtlab_sys_setrlimit(int res, const struct rlimit *rl) { return (int)raw6(SYS_prlimit64, 0, res, (long)rl, 0, 0, 0); }
void *mtlab_sys_mmap(size_t len) {
    long r = raw6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return (r < 0 && r > -4096) ? NULL : (void *)r;
}
void *mtlab_sys_mmap_shared(size_t len, int fd) {
    long r = raw6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return (r < 0 && r > -4096) ? NULL : (void *)r;
}
void mtlab_sys_munmap(void *p, size_t len) { raw6(SYS_munmap, (long)p, (long)len, 0, 0, 0, 0); }
int mtlab_sys_mprotect(void *p, size_t len, int prot) { return (int)raw6(SYS_mprotect, (long)p, (long)len, prot, 0, 0, 0); }
uint32_t mtlab_gettid(void) { return (uint32_t)raw6(SYS_gettid, 0, 0, 0, 0, 0, 0); }
uint32_t mtlab_sys_getpid(void) { return (uint32_t)raw6(SYS_getpid, 0, 0, 0, 0, 0, 0); }

uint64_t mtlab_realtime_ns(void) {
    struct timespec ts;
    raw6(SYS_clock_gettime, CLOCK_REALTIME, (long)&ts, 0, 0, 0, 0);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

size_t mtlab_strlen(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

/* Appends src at dst, never writing at or past end; returns the new end. */
char *mtlab_append(char *dst, const char *end, const char *src) {
    while (*src && dst < end) *dst++ = *src++;
    return dst;
}

char *mtlab_append_u64(char *dst, const char *end, uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n && dst < end) *dst++ = tmp[--n];
    return dst;
}
