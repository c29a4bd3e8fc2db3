/*
 * seccomp.c — a program that installs a seccomp filter (prctl(PR_SET_SECCOMP)
 * or the seccomp system call, as libseccomp makes it) keeps running as it
 * would untraced. The writer's system calls (pwrite64, fstat, prlimit64,
 * getpid, ...) are ones a sandbox's allow-list rarely names: made after a
 * filter that kills on them, they would kill the program (SIGSYS), and made
 * after one that fails them, the trace would end without a word.
 *
 * So the new filter is run here first, on every system call mtlab's library
 * may make, with the arguments it makes them with. If any would not be
 * allowed (or, for calls whose failure mtlab tolerates, would do more than
 * fail), the trace is finished now — buffers written, STATS (with
 * `stopped_by_seccomp=1`) and END — and tracing stops, before the filter is
 * installed. Strict mode allows only read, write, exit and sigreturn: always
 * a stop.
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#define EXPORT __attribute__((visibility("default")))

static _Atomic int stopped_by_seccomp;

int mtlab_stopped_by_seccomp(void) { return atomic_load(&stopped_by_seccomp); }

/* The verdict of classic BPF program `f` (as seccomp runs it) on `d`; a
 * program it cannot run is taken as a kill. */
static uint32_t run_filter(const struct sock_fprog *f, const struct seccomp_data *d) {
    uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
    if (!f || !f->filter || f->len == 0 || f->len > BPF_MAXINSNS) return SECCOMP_RET_KILL_PROCESS;
    for (unsigned pc = 0; pc < f->len; pc++) {
        const struct sock_filter *i = &f->filter[pc];
        uint32_t k = i->k;
        switch (BPF_CLASS(i->code)) {
        case BPF_LD:
        case BPF_LDX: {
            uint32_t v;
            switch (BPF_MODE(i->code)) {
            case BPF_ABS:
                if (BPF_SIZE(i->code) != BPF_W || k > sizeof *d - 4 || (k & 3)) return SECCOMP_RET_KILL_PROCESS;
                memcpy(&v, (const char *)d + k, 4);
                break;
            case BPF_IMM: v = k; break;
            case BPF_MEM:
                if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS;
                v = mem[k];
                break;
            case BPF_LEN: v = sizeof *d; break;
            default: return SECCOMP_RET_KILL_PROCESS;
            }
            if (BPF_CLASS(i->code) == BPF_LD) a = v;
            else x = v;
            break;
        }
        case BPF_ST:
        case BPF_STX:
            if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS;
            mem[k] = BPF_CLASS(i->code) == BPF_ST ? a : x;
            break;
        case BPF_ALU: {
            uint32_t s = BPF_SRC(i->code) == BPF_X ? x : k;
            switch (BPF_OP(i->code)) {
            case BPF_ADD: a += s; break;
            case BPF_SUB: a -= s; break;
            case BPF_MUL: a *= s; break;
            case BPF_DIV:
                if (!s) return SECCOMP_RET_KILL_PROCESS;
                a /= s;
                break;
            case BPF_MOD:
                if (!s) return SECCOMP_RET_KILL_PROCESS;
                a %= s;
                break;
            case BPF_OR: a |= s; break;
            case BPF_AND: a &= s; break;
            case BPF_XOR: a ^= s; break;
            case BPF_LSH: a = s < 32 ? a << s : 0; break;
            case BPF_RSH: a = s < 32 ? a >> s : 0; break;
            case BPF_NEG: a = -a; break;
            default: return SECCOMP_RET_KILL_PROCESS;
            }
            break;
        }
        case BPF_JMP: {
            if (BPF_OP(i->code) == BPF_JA) {
                pc += k;
                break;
            }
            uint32_t s = BPF_SRC(i->code) == BPF_X ? x : k;
            int t;
            switch (BPF_OP(i->code)) {
            case BPF_JEQ: t = a == s; break;
            case BPF_JGT: t = a > s; break;
            case BPF_JGE: t = a >= s; break;
            case BPF_JSET: t = (a & s) != 0; break;
            default: return SECCOMP_RET_KILL_PROCESS;
            }
            pc += t ? i->jt : i->jf;
            break;
        }
        case BPF_RET: return BPF_RVAL(i->code) == BPF_A ? a : k;
        case BPF_MISC:
            if (BPF_MISCOP(i->code) == BPF_TAX) x = a;
            else a = x;
            break;
        default: return SECCOMP_RET_KILL_PROCESS;
        }
    }
    return SECCOMP_RET_KILL_PROCESS; /* fell off the end */
}

/* The system calls the library may make after start-up, with the arguments
 * it makes them with (0 where they vary); `must`: a failure loses events. */
struct call {
    int nr, must;
    uint64_t args[6];
};

static int filter_lets_mtlab_run(const struct sock_fprog *f) {
#if !defined(__x86_64__)
    /* The calls below are x86-64's; elsewhere the filter is not checked. */
    (void)f;
    return 1;
#else
    int fd = mtlab_trace_fd();
    uint64_t ufd = (uint64_t)(fd < 0 ? 900 : fd);
    const struct call calls[] = {
        {SYS_pwrite64, 1, {ufd, 0, 0, 0}},
        {SYS_rt_sigprocmask, 0, {SIG_SETMASK, 0, 0, 8}},
        {SYS_fstat, 1, {ufd, 0}},
        {SYS_prlimit64, 1, {0, RLIMIT_FSIZE, 0, 0}},
        {SYS_getpid, 1, {0}},
        {SYS_mmap, 1, {0, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0}},
        {SYS_openat, 0, {(uint64_t)(int64_t)AT_FDCWD, 0, O_RDONLY | O_CLOEXEC, 0}},
        {SYS_openat, 0, {(uint64_t)(int64_t)AT_FDCWD, 0, O_WRONLY | O_CLOEXEC, 0}},
        {SYS_read, 0, {0}},
        {SYS_close, 0, {0}},
        {SYS_fcntl, 0, {0, F_DUPFD_CLOEXEC, 900}},
        {SYS_getrusage, 0, {RUSAGE_SELF, 0}},
        {SYS_nanosleep, 0, {0}},
        {SYS_gettid, 0, {0}},
        {SYS_tgkill, 0, {0}},
        {SYS_kcmp, 0, {0}},
        {SYS_ftruncate, 0, {ufd, 0}},
        {SYS_munmap, 0, {0}},
        {SYS_mprotect, 0, {0}},
        {SYS_futex, 0, {0}},
        {SYS_unlinkat, 0, {(uint64_t)(int64_t)AT_FDCWD, 0, 0}},
        {SYS_clock_gettime, 0, {0}},
        {SYS_readlink, 0, {0}},
        {SYS_openat, 0, {0, 0, O_RDONLY | O_CLOEXEC, 0}}, /* through the /proc descriptor */
        {SYS_readlinkat, 0, {0}},
        {SYS_process_vm_readv, 0, {0}}, /* arena.c: a heap glibc may have unmapped */
        /* a fork child's file made by `mtlab record` (broker.c) */
        {SYS_socketpair, 0, {AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, 0}},
        {SYS_sendmsg, 0, {0, 0, MSG_NOSIGNAL}},
        {SYS_recvmsg, 0, {0, 0, MSG_CMSG_CLOEXEC | MSG_DONTWAIT}},
        {SYS_ppoll, 0, {0, 1, 0, 0, 8}},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        struct seccomp_data d;
        memset(&d, 0, sizeof d);
        d.nr = calls[i].nr;
        d.arch = AUDIT_ARCH_X86_64;
        memcpy(d.args, calls[i].args, sizeof d.args);
        uint32_t action = run_filter(f, &d) & SECCOMP_RET_ACTION_FULL;
        int allowed = action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG;
        int fails_only = action == SECCOMP_RET_ERRNO;
        if (!allowed && (calls[i].must || !fails_only)) return 0;
    }
    return 1;
#endif
}

/* Before a filter (or strict mode) is installed: finish the trace if the
 * library could not go on under it. Each of the three ways in numbers the
 * modes its own way; the callers say which one is asked for, if any. */
static void before_seccomp(int strict, int filter, const struct sock_fprog *f) {
    if ((!strict && !filter) || mtlab_tls.guard) return;
    if (atomic_load(&mtlab_state) != MTLAB_TRACING) return;
    if (!strict && filter_lets_mtlab_run(f)) return;
    atomic_store(&stopped_by_seccomp, 1);
    mtlab_finish_now();
}

EXPORT int prctl(int option, ...) {
    va_list ap;
    va_start(ap, option);
    unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long), a4 = va_arg(ap, unsigned long),
                  a5 = va_arg(ap, unsigned long);
    va_end(ap);
    if (option == PR_SET_SECCOMP)
        before_seccomp(a2 == SECCOMP_MODE_STRICT, a2 == SECCOMP_MODE_FILTER, (const struct sock_fprog *)a3);
    /* Resolved with the others (dlsym here could run in a signal handler). */
    if (UNLIKELY(!mtlab_real.prctl)) mtlab_resolve();
    return mtlab_real.prctl(option, a2, a3, a4, a5);
}

EXPORT long syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_seccomp)
        before_seccomp(a[0] == SECCOMP_SET_MODE_STRICT, a[0] == SECCOMP_SET_MODE_FILTER, (const struct sock_fprog *)a[2]);
    else if (nr == SYS_prctl && a[0] == PR_SET_SECCOMP)
        before_seccomp(a[1] == SECCOMP_MODE_STRICT, a[1] == SECCOMP_MODE_FILTER, (const struct sock_fprog *)a[2]);
    if (UNLIKELY(!mtlab_real.syscall)) mtlab_resolve();
    return mtlab_real.syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
