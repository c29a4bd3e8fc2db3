/* A Volanomark-shaped chat benchmark on loopback TCP (the NPTL study's
 * third workload): R rooms of U users, each user a TCP connection to a
 * server; every message a user sends is broadcast to every user of its room,
 * the sender included. A user sends its next message once its previous one
 * came back, so at most one own message is in flight and no socket buffer
 * ever fills (blocking I/O cannot deadlock).
 *
 *   --mode threads   the original's shape: a server thread per connection
 *                    and a client thread per user (2·R·U threads)
 *   --mode epoll     the same protocol and messages with one server thread
 *                    and one client thread, each driving every connection
 *                    through epoll: the difference is the thread library's
 *                    share (creation, switches, wake-ups)
 *
 * Options: --rooms R (10) --users U per room (20) --messages M per user (100;
 * with --ms MS, at least M and as many more as fit in MS milliseconds)
 * --size B bytes per message (100) --mode threads|epoll --cpus LIST
 * --ticks-per-ns X. Prints one JSON line: messages delivered per second and
 * delivery latency percentiles (send stamp to receipt, timer cost
 * subtracted).
 *
 * The duration is the clients' own: from the first message any user sent to
 * the last any user received (their cycle-counter stamps). The main thread
 * only waits; it may wake from the start barrier late on a busy host (up to
 * 100 ms was seen), and a clock started there shrank the duration and
 * inflated the rate ninefold. --main-delay MS makes it that late on purpose
 * (a test of this). */
#include "common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    uint32_t room, sender, seq, last; /* last: the sender sends nothing after it */
    uint64_t sent_at;
} header_t;

static int rooms = 10, users = 20, messages = 100, msg_size = 100;
static int nconn;              /* rooms × users */
static int *server_fd;         /* by user id, server side */
static pthread_mutex_t *wlock; /* one per server-side connection: whole messages only */
static int *client_fd;         /* by user id, client side */
static pthread_barrier_t start;
static double timer;
static volatile uint64_t delivered, sent_total;
/* The clients' first send and last receipt, in ticks: the measured span. */
static uint64_t first_send = UINT64_MAX, last_receipt;

/* GCC has no __atomic_fetch_min/max: a compare-and-swap loop (once per user). */
static void atomic_min(uint64_t *p, uint64_t v) {
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void atomic_max(uint64_t *p, uint64_t v) {
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}
/* With --ms, users keep sending past --messages until this time (0: exactly --messages). */
static uint64_t deadline_ns;

/* ---- blocking I/O that tolerates non-blocking sockets ---------------------- */

static void wait_fd(int fd, short ev) {
    struct pollfd p = {.fd = fd, .events = ev};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
}

static void write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            wait_fd(fd, POLLOUT);
        } else if (!(w < 0 && errno == EINTR)) {
            die("write to a chat connection: %s", strerror(errno));
        }
    }
}

/* Reads exactly n bytes; 0 at a clean end of stream before any byte. */
static int read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0 && got == 0)
            return 0;
        else if (r == 0)
            die("a chat connection closed in the middle of a message");
        else if (errno != EINTR)
            die("read from a chat connection: %s", strerror(errno));
    }
    return 1;
}

/* Sends the user's message number `seq`; returns whether it was the last. */
static int send_message(int fd, char *buf, int user, uint32_t seq) {
    header_t *h = (header_t *)buf;
    h->room = (uint32_t)(user / users);
    h->sender = (uint32_t)user;
    h->seq = seq;
    h->last = seq + 1 >= (uint32_t)messages && (deadline_ns == 0 || mono_ns() >= deadline_ns);
    __atomic_fetch_add(&sent_total, 1, __ATOMIC_RELAXED);
    h->sent_at = ticks();
    if (seq == 0)
        atomic_min(&first_send, h->sent_at);
    write_all(fd, buf, (size_t)msg_size);
    return (int)h->last;
}

/* The server's work for one message: to every user of the sender's room. */
static void broadcast(const char *msg, int locked) {
    const header_t *h = (const header_t *)msg;
    int first = (int)h->room * users;
    for (int u = first; u < first + users; u++) {
        if (locked)
            pthread_mutex_lock(&wlock[u]);
        write_all(server_fd[u], msg, (size_t)msg_size);
        if (locked)
            pthread_mutex_unlock(&wlock[u]);
    }
}

/* What a user keeps: messages received, senders of its room finished (a
 * server writes each sender's messages in order, so a sender's last message
 * is its last to arrive), and whether its own last one went out. */
typedef struct {
    int got, finished, sent, done_sending;
    uint64_t last_at; /* ticks at the latest receipt */
} user_state_t;

/* A received message: its latency; returns whether the user should send
 * its next message (its own echo came back and it has more to say). */
static int receipt(const char *msg, int user, user_state_t *st, hist_t *h) {
    const header_t *hd = (const header_t *)msg;
    st->last_at = ticks();
    hist_add(h, st->last_at - hd->sent_at);
    st->got++;
    st->finished += hd->last ? 1 : 0;
    return (int)hd->sender == user && !st->done_sending;
}

/* ---- threads mode ---------------------------------------------------------- */

static void *server_conn(void *arg) {
    int u = (int)(intptr_t)arg;
    char *msg = malloc((size_t)msg_size);
    note_cpu();
    while (read_all(server_fd[u], msg, (size_t)msg_size))
        broadcast(msg, 1);
    free(msg);
    return NULL;
}

typedef struct {
    int user;
    hist_t hist;
} client_t;

static void *client_user(void *arg) {
    client_t *c = arg;
    int fd = client_fd[c->user];
    user_state_t st = {0};
    char *msg = calloc(1, (size_t)msg_size);
    note_cpu();
    pthread_barrier_wait(&start);
    st.done_sending = send_message(fd, msg, c->user, (uint32_t)st.sent++);
    while (st.finished < users) {
        if (!read_all(fd, msg, (size_t)msg_size))
            die("the server closed user %d's connection early", c->user);
        if (receipt(msg, c->user, &st, &c->hist))
            st.done_sending = send_message(fd, msg, c->user, (uint32_t)st.sent++);
        if ((st.got & 63) == 0)
            note_cpu();
    }
    __atomic_fetch_add(&delivered, (uint64_t)st.got, __ATOMIC_RELAXED);
    atomic_max(&last_receipt, st.last_at);
    shutdown(fd, SHUT_WR);
    free(msg);
    return NULL;
}

/* ---- epoll mode ------------------------------------------------------------ */

typedef struct {
    char *buf;
    size_t have;
    user_state_t user;
} conn_state_t;

/* Reads what a non-blocking socket has into st; calls on_msg per whole
 * message. Returns 0 at end of stream. */
static int pump(int fd, conn_state_t *st, void (*on_msg)(int, conn_state_t *, void *), int id, void *ctx) {
    for (;;) {
        ssize_t r = read(fd, st->buf + st->have, (size_t)msg_size - st->have);
        if (r > 0) {
            st->have += (size_t)r;
            if (st->have == (size_t)msg_size) {
                on_msg(id, st, ctx);
                st->have = 0;
            }
        } else if (r == 0) {
            if (st->have)
                die("a chat connection closed in the middle of a message");
            return 0;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return 1;
        } else if (errno != EINTR) {
            die("read from a chat connection: %s", strerror(errno));
        }
    }
}

static void server_msg(int id, conn_state_t *st, void *ctx) {
    (void)id, (void)ctx;
    broadcast(st->buf, 0);
}

static void *server_loop(void *arg) {
    (void)arg;
    int ep = epoll_create1(0), open_conns = nconn;
    conn_state_t *st = calloc((size_t)nconn, sizeof *st);
    for (int u = 0; u < nconn; u++) {
        st[u].buf = malloc((size_t)msg_size);
        fcntl(server_fd[u], F_SETFL, O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)u};
        epoll_ctl(ep, EPOLL_CTL_ADD, server_fd[u], &ev);
    }
    note_cpu();
    struct epoll_event evs[64];
    while (open_conns > 0) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            int u = (int)evs[i].data.u32;
            if (!pump(server_fd[u], &st[u], server_msg, u, NULL)) {
                epoll_ctl(ep, EPOLL_CTL_DEL, server_fd[u], NULL);
                open_conns--;
            }
        }
    }
    return NULL;
}

static char *client_out; /* the one client thread's outgoing message */

static void client_msg(int u, conn_state_t *st, void *ctx) {
    if (receipt(st->buf, u, &st->user, ctx))
        st->user.done_sending = send_message(client_fd[u], client_out, u, (uint32_t)st->user.sent++);
}

static void *client_loop(void *arg) {
    hist_t *h = arg;
    int ep = epoll_create1(0), done = 0;
    conn_state_t *st = calloc((size_t)nconn, sizeof *st);
    client_out = calloc(1, (size_t)msg_size);
    for (int u = 0; u < nconn; u++) {
        st[u].buf = malloc((size_t)msg_size);
        fcntl(client_fd[u], F_SETFL, O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)u};
        epoll_ctl(ep, EPOLL_CTL_ADD, client_fd[u], &ev);
    }
    note_cpu();
    pthread_barrier_wait(&start);
    for (int u = 0; u < nconn; u++)
        st[u].user.done_sending = send_message(client_fd[u], client_out, u, (uint32_t)st[u].user.sent++);
    struct epoll_event evs[64];
    while (done < nconn) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            int u = (int)evs[i].data.u32;
            if (!pump(client_fd[u], &st[u], client_msg, u, h))
                die("the server closed user %d's connection early", u);
            if (st[u].user.finished == users) {
                __atomic_fetch_add(&delivered, (uint64_t)st[u].user.got, __ATOMIC_RELAXED);
                atomic_max(&last_receipt, st[u].user.last_at);
                epoll_ctl(ep, EPOLL_CTL_DEL, client_fd[u], NULL);
                shutdown(client_fd[u], SHUT_WR);
                done++;
            }
        }
    }
    return NULL;
}

/* ---- set-up ---------------------------------------------------------------- */

static int threads_created;

static void spawn(pthread_t *t, void *(*fn)(void *), void *arg) {
    int e = pthread_create(t, NULL, fn, arg);
    if (e)
        die("cannot create thread %d: %s", threads_created + 1, strerror(e));
    threads_created++;
}

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void usage(void) {
    die("usage: chat [--rooms R] [--users U] [--messages M] [--ms MS] [--size BYTES] [--mode threads|epoll] [--cpus LIST] "
        "[--ticks-per-ns X] [--main-delay MS]");
}

int main(int argc, char **argv) {
    const char *mode = "threads";
    long main_delay_ms = 0;
    common_opts_t co = {0};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *o = argv[i], *v = argv[++i];
        if (common_option(&co, o, v))
            continue;
        if (!strcmp(o, "--rooms"))
            rooms = (int)opt_long(o, v, 1, 10000);
        else if (!strcmp(o, "--users"))
            users = (int)opt_long(o, v, 1, 10000);
        else if (!strcmp(o, "--messages"))
            messages = (int)opt_long(o, v, 1, 100000000);
        else if (!strcmp(o, "--size"))
            msg_size = (int)opt_long(o, v, (long)sizeof(header_t), 1 << 20);
        else if (!strcmp(o, "--mode"))
            mode = v;
        else if (!strcmp(o, "--main-delay"))
            main_delay_ms = opt_long(o, v, 0, 60000);
        else
            usage();
    }
    int threaded = !strcmp(mode, "threads");
    if (!threaded && strcmp(mode, "epoll"))
        die("--mode: expected threads or epoll, got '%s'", mode);
    nconn = rooms * users;
    if ((long)nconn > 200000)
        die("%d rooms × %d users is more connections than this benchmark opens (200000 at most)", rooms, users);
    common_setup(&co);
    long ms = co.ms;
    double tpn = co.ticks_per_ns;
    timer = timer_cost_ticks();

    struct rlimit rl;
    long need = 2L * nconn + 16;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && (rlim_t)need > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if ((rlim_t)need > rl.rlim_cur)
            die("%d connections need %ld descriptors, but at most %llu may be open (raise ulimit -n)", nconn, need,
                (unsigned long long)rl.rlim_cur);
    }

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 4096) ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen))
        die("cannot listen on 127.0.0.1: %s", strerror(errno));
    server_fd = calloc((size_t)nconn, sizeof *server_fd);
    client_fd = calloc((size_t)nconn, sizeof *client_fd);
    wlock = calloc((size_t)nconn, sizeof *wlock);
    /* Connect one at a time; each says who it is, so rooms never depend on accept order. */
    for (int u = 0; u < nconn; u++) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof addr))
            die("cannot connect user %d to the chat server: %s", u, strerror(errno));
        uint32_t id = (uint32_t)u;
        write_all(c, &id, sizeof id);
        int s = accept(lfd, NULL, NULL);
        if (s < 0)
            die("accept: %s", strerror(errno));
        if (!read_all(s, &id, sizeof id) || id >= (uint32_t)nconn)
            die("a chat client sent a bad hello");
        nodelay(c);
        nodelay(s);
        client_fd[u] = c;
        server_fd[id] = s;
        pthread_mutex_init(&wlock[id], NULL);
    }
    close(lfd);

    int nthreads = threaded ? 2 * nconn : 2;
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    client_t *clients = threaded ? calloc((size_t)nconn, sizeof *clients) : NULL;
    static hist_t one;
    pthread_barrier_init(&start, NULL, (unsigned)(threaded ? nconn + 1 : 2));
    if (threaded) {
        for (int u = 0; u < nconn; u++)
            spawn(&th[u], server_conn, (void *)(intptr_t)u);
        for (int u = 0; u < nconn; u++) {
            clients[u].user = u;
            spawn(&th[nconn + u], client_user, &clients[u]);
        }
    } else {
        spawn(&th[0], server_loop, NULL);
        spawn(&th[1], client_loop, &one);
    }
    /* Set before the start: users read it from their first message on. */
    if (ms)
        deadline_ns = mono_ns() + (uint64_t)ms * 1000000ull;
    pthread_barrier_wait(&start);
    if (main_delay_ms) {
        struct timespec d = {main_delay_ms / 1000, (main_delay_ms % 1000) * 1000000L};
        while (nanosleep(&d, &d) && errno == EINTR) {
        }
    }
    /* How late the main thread was, seen from the clients' clock: shown, not used. */
    uint64_t main_at = ticks();
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    note_cpu();
    if (first_send == UINT64_MAX || last_receipt <= first_send)
        die("the clients' stamps give no duration (first send %llu, last receipt %llu ticks)",
            (unsigned long long)first_send, (unsigned long long)last_receipt);
    double seconds = (double)(last_receipt - first_send) / tpn / 1e9;
    double main_late_ms = main_at > first_send ? (double)(main_at - first_send) / tpn / 1e6 : 0.0;

    static hist_t all;
    if (threaded)
        for (int u = 0; u < nconn; u++)
            hist_merge(&all, &clients[u].hist);
    else
        hist_merge(&all, &one);
    /* Every message sent reaches every user of its room, the sender included. */
    uint64_t want = sent_total * (uint64_t)users;
    if (delivered != want || all.count != want)
        die("delivered %llu messages, expected %llu", (unsigned long long)delivered, (unsigned long long)want);
    double us = 1.0 / (tpn * 1000.0);
    char seen[256];
    cpus_seen(seen, sizeof seen);
    printf("{\"workload\":\"chat\",\"libc\":\"%s\",\"mode\":\"%s\",\"rooms\":%d,\"users\":%d,\"messages\":%d,\"size\":%d,"
           "\"connections\":%d,\"threads\":%d,\"sent\":%llu,\"delivered\":%llu,\"seconds\":%.6f,\"msgs_per_s\":%.1f,"
           "\"latency_mean_us\":%.3f,\"latency_p50_us\":%.3f,\"latency_p99_us\":%.3f,"
           "\"main_late_ms\":%.3f,\"timer_ticks\":%.1f,\"ticks_per_ns\":%.6f,\"cpus_seen\":\"%s\"}\n",
           libc_name(), mode, rooms, users, messages, msg_size, nconn, threads_created, (unsigned long long)sent_total, (unsigned long long)delivered,
           seconds, (double)delivered / seconds, (all.sum / (double)all.count - timer) * us,
           (hist_quantile(&all, 0.5) - timer) * us, (hist_quantile(&all, 0.99) - timer) * us, main_late_ms, timer, tpn, seen);
    return 0;
}
