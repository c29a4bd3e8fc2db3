/*
 * broker.c — a trace file made by `mtlab record` for a process that cannot
 * make its own: a daemon that dropped privileges (setuid) or chrooted before
 * it forked its workers. Such a child can no longer create a file in the
 * trace's directory (its new user may not write there; inside the jail the
 * path does not exist), and a file it did create would belong to another
 * user than mtlab's, which `record` refuses as planted.
 *
 * `record` passes one end of a SOCK_SEQPACKET pair (MTLAB_BROKER_FD, at a
 * high number, inherited across exec so that exec'd images have it too; not
 * close-on-exec, which posix_spawn's children would lose). A process that
 * needs a file sends a request with a socket of its own for the answer; the
 * kernel attaches its pid (SO_PASSCRED), so `record` creates ROOT.d/PID[.N]
 * for that pid only, owned by mtlab's user, 0600, and sends the descriptor
 * back — or counts and names the process as untraced when it cannot. A
 * process whose own attempt failed for another reason (a full disk) asks too,
 * so that it is counted.
 *
 * Raw system calls only: this runs from inside a shim (the first write of a
 * fork child), never calls malloc or stdio, and waits for `record` at most
 * BROKER_WAIT_MS.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define BROKER_WAIT_MS 5000
#define BROKER_MAGIC "mtlab-open1"
#define PAGE_MAGIC "mtlab-page1"

static int broker_fd = -1;
static uint64_t broker_ino;
static uint32_t broker_uid = UINT32_MAX; /* mtlab record's user, from SO_PEERCRED */

void mtlab_broker_init(const char *value, uint32_t record_pid) {
    if (!value || !*value) return;
    long fd = 0;
    for (const char *v = value; *v; v++) {
        if (*v < '0' || *v > '9' || fd > 0x7fffffff / 10) return;
        fd = fd * 10 + (*v - '0');
    }
    struct stat st;
    if (mtlab_sys_fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
    /* The number may be another file's if the environment was passed on:
     * only a socket whose other end is held by the `mtlab record` named in
     * MTLAB_PARENT. */
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (mtlab_sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_PEERCRED, (long)&cred, (long)&len, 0) != 0) return;
    if ((uint32_t)cred.pid != record_pid) return;
    broker_fd = (int)fd;
    broker_ino = (uint64_t)st.st_ino;
    broker_uid = (uint32_t)cred.uid;
}

/* Still our socket: the program may have closed the number or reused it. */
static int broker_usable(void) {
    struct stat st;
    return broker_fd >= 0 && mtlab_sys_fstat(broker_fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
           (uint64_t)st.st_ino == broker_ino;
}

/* Whether a file this process creates itself would be refused by `record`
 * (another user's): then it asks first. */
int mtlab_broker_preferred(void) { return broker_usable() && mtlab_sys_geteuid() != broker_uid; }

/* Sends `len` bytes of `data` to `record` with descriptor `fd` attached. */
static long send_with_fd(const void *data, size_t len, int fd, int flags) {
    struct iovec iov = {(void *)data, len};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } c;
    memset(&c, 0, sizeof c);
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = c.buf;
    m.msg_controllen = sizeof c.buf;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof(int));
    return mtlab_sys6(SYS_sendmsg, broker_fd, (long)&m, flags, 0, 0, 0);
}

/* Asks `record` for this process's trace file; `own_error` is why this
 * process could not create it itself (0: it did not try). Returns the
 * descriptor (name in `path`, up to `cap` bytes) or -1. */
int mtlab_broker_open(int own_error, char *path, size_t cap) {
    if (!broker_usable()) return -1;
    int sv[2];
    if (mtlab_sys6(SYS_socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, (long)sv, 0, 0) != 0) return -1;
    char req[32];
    memcpy(req, BROKER_MAGIC, sizeof BROKER_MAGIC);
    int32_t e = own_error;
    memcpy(req + sizeof BROKER_MAGIC, &e, 4);
    long sent = send_with_fd(req, sizeof BROKER_MAGIC + 4, sv[1], MSG_NOSIGNAL);
    mtlab_sys_close(sv[1]);
    int got = -1;
    if (sent > 0) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int))];
        } c;
        struct msghdr m;
        struct pollfd p = {sv[0], POLLIN, 0};
        struct timespec ts = {BROKER_WAIT_MS / 1000, 0};
        long ready;
        do {
            ready = mtlab_sys6(SYS_ppoll, (long)&p, 1, (long)&ts, 0, 8, 0);
        } while (ready == -4 /* EINTR: ts holds the time left */);
        char ans[4200];
        struct iovec aiov = {ans, sizeof ans - 1};
        memset(&c, 0, sizeof c);
        memset(&m, 0, sizeof m);
        m.msg_iov = &aiov;
        m.msg_iovlen = 1;
        m.msg_control = c.buf;
        m.msg_controllen = sizeof c.buf;
        long n = ready == 1 ? mtlab_sys6(SYS_recvmsg, sv[0], (long)&m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT, 0, 0, 0) : -1;
        struct cmsghdr *h = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
        if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int))) {
            memcpy(&got, CMSG_DATA(h), sizeof(int));
            /* Answer: the file's path. */
            size_t k = (size_t)n < cap - 1 ? (size_t)n : cap - 1;
            memcpy(path, ans, k);
            path[k] = 0;
        }
    }
    mtlab_sys_close(sv[0]);
    return got;
}

/* `record --live`: hands this image's watermark page (a memfd) to `record`,
 * which reads the trace below it while the process runs. Nothing is waited
 * for: a socket whose buffer is full refuses at once (-1), and the process
 * is then read when the run ends. */
int mtlab_broker_send_page(int memfd) {
    if (!broker_usable()) return -1;
    return send_with_fd(PAGE_MAGIC, sizeof PAGE_MAGIC, memfd, MSG_NOSIGNAL | MSG_DONTWAIT) > 0 ? 0 : -1;
}
