/*
 * seccomp_filter.c — N malloc(48)+free pairs (in `before_filter`), then the
 * program installs a seccomp filter, then N more pairs (in `after_filter`).
 *
 * Usage: seccomp_filter MODE N
 *   MODE kill:    an allow-list of what this program needs (read, write,
 *                 brk, mmap, munmap, exit, exit_group, ...), others kill
 *                 the process (SIGSYS) — prctl(PR_SET_SECCOMP);
 *   MODE errno:   the same allow-list, others fail with EPERM — prctl;
 *   MODE syscall: the kill allow-list through syscall(SYS_seccomp), as
 *                 libseccomp installs it;
 *   MODE lenient: everything but ptrace allowed — prctl.
 *
 * Expected: exit code 0 (3, 4: installing failed; 2: bad arguments). No
 * stdio.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static void *volatile sink;

__attribute__((noinline)) static void before_filter(long n) {
    for (long i = 0; i < n; i++) {
        void *p = malloc(48);
        sink = p;
        free(p);
    }
}

__attribute__((noinline)) static void after_filter(long n) {
    for (long i = 0; i < n; i++) {
        void *p = malloc(48);
        sink = p;
        free(p);
    }
}

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *mode = argv[1];
    long n = atol(argv[2]);
    before_filter(n);
    unsigned deflt = strcmp(mode, "errno") == 0 ? SECCOMP_RET_ERRNO | EPERM : SECCOMP_RET_KILL_PROCESS;
    struct sock_filter list[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_brk), ALLOW(SYS_mmap), ALLOW(SYS_munmap),
        ALLOW(SYS_mremap), ALLOW(SYS_madvise), ALLOW(SYS_mprotect), ALLOW(SYS_futex),
        ALLOW(SYS_exit), ALLOW(SYS_exit_group), ALLOW(SYS_rt_sigreturn), ALLOW(SYS_getpid),
        BPF_STMT(BPF_RET | BPF_K, deflt),
    };
    struct sock_filter lenient[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ptrace, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    int is_lenient = strcmp(mode, "lenient") == 0;
    struct sock_fprog prog = {is_lenient ? sizeof lenient / sizeof lenient[0] : sizeof list / sizeof list[0],
                              is_lenient ? lenient : list};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 3;
    int r = strcmp(mode, "syscall") == 0 ? (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)
                                          : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
    if (r != 0) return 4;
    after_filter(n);
    return 0;
}
