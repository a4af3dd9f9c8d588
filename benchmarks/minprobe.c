/*
 * The least a prober must do, as a yardstick for the CPU time of `probe` (benchmarks/probe_cpu.sh):
 * THREADS threads, one connection each, each sending PING at fixed intended times (staggered so
 * together they sample every 1 / (THREADS x RATE) s), pipelined (open loop: a probe never waits
 * for an earlier reply), reading replies as they arrive with the kernel's receive stamp
 * (SO_TIMESTAMPNS) and storing each latency (stamp - intended time) in an array allocated before
 * the run. Nothing else: no parsing beyond counting "+PONG\r\n", no records, no output until the
 * end.
 *
 * Waiting is what a careful prober does: it sleeps in ppoll on its socket until SPIN_US before the
 * next intended time (timer slack 1 ns, so the sleep ends when asked), taking replies that arrive
 * meanwhile, and spins the rest (SPIN_US 0: no spin, the send follows the ppoll wake-up).
 * With DEFER 1 it does what the probe engine does at 200 probes a second per thread or more: it
 * sleeps (clock_nanosleep) until SPIN_US before the next intended time without waking for
 * replies, reads every reply that came, spins the rest and sends: one wake-up per probe.
 * It reads one reply's length at a time, as the probe engine does, so a stamp covers one reply,
 * and stops reading once every probe sent is answered (no read that can only say EAGAIN).
 *
 *   minprobe HOST PORT THREADS RATE_PER_THREAD SECONDS [SPIN_US [DEFER]]
 *
 * Prints one line: sent=N replied=N lat_p50_us= lat_p99_us= lag_p50_us= lag_p99_us= lag_max_us=
 * (lag: how late each send left after its intended time, on the monotonic clock).
 *
 * Build: gcc -O2 -pthread -o minprobe benchmarks/minprobe.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char PING[] = "*1\r\n$4\r\nPING\r\n";
#define PING_LEN (sizeof(PING) - 1)
#define PONG_LEN 7 /* "+PONG\r\n" */

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct worker {
    int fd;
    int64_t first_ns, period_ns, end_ns, spin_ns;
    int defer; /* read replies only when waking to send */
    size_t max_probes;
    int64_t *intended; /* per probe, monotonic ns */
    int64_t *latency;  /* per reply, ns */
    int64_t *lag;      /* per send, ns */
    size_t sent, replied;
    size_t partial; /* bytes of an unfinished reply */
    int failed;
};

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Reads the replies that have arrived (non-blocking), one reply's length at a time, until none is
 * left or every probe sent is answered. */
static void take_replies(struct worker *w) {
    for (;;) {
        char buf[PONG_LEN];
        char control[256];
        struct iovec iov = {buf, PONG_LEN - w->partial};
        struct msghdr msg = {0};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        ssize_t n = recvmsg(w->fd, &msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            die("recvmsg");
        }
        if (n == 0) {
            fprintf(stderr, "minprobe: the server closed the connection\n");
            exit(1);
        }
        int64_t mono = mono_ns(), real = real_ns(), at = mono;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof(ts));
                at = mono - (real - ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec));
            }
        }
        if (w->partial == 0 && buf[0] != '+') {
            fprintf(stderr, "minprobe: unexpected reply\n");
            exit(1);
        }
        w->partial += (size_t)n;
        if (w->partial == PONG_LEN) {
            w->partial = 0;
            if (w->replied < w->sent) {
                w->latency[w->replied] = at - w->intended[w->replied];
                w->replied++;
            }
            /* Every probe answered: another read would only say EAGAIN. */
            if (w->replied == w->sent) return;
        }
    }
}

/* Sleeps in ppoll until `until` (monotonic ns), taking replies as they arrive. */
static void wait_until(struct worker *w, int64_t until) {
    for (;;) {
        int64_t left = until - mono_ns();
        if (left <= 0) return;
        struct timespec ts = {left / 1000000000, left % 1000000000};
        struct pollfd pfd = {w->fd, POLLIN, 0};
        int rc = ppoll(&pfd, 1, &ts, NULL);
        if (rc < 0 && errno != EINTR) die("ppoll");
        if (rc > 0) take_replies(w);
    }
}

static void *run(void *arg) {
    struct worker *w = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    for (size_t seq = 0; seq < w->max_probes; seq++) {
        int64_t due = w->first_ns + (int64_t)seq * w->period_ns;
        if (due >= w->end_ns) break;
        if (w->defer) {
            int64_t until = due - w->spin_ns;
            struct timespec ts = {until / 1000000000, until % 1000000000};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
            }
            take_replies(w);
        } else {
            wait_until(w, due - w->spin_ns);
        }
        int64_t now;
        while ((now = mono_ns()) < due) {
        }
        w->intended[seq] = due;
        w->lag[seq] = now - due;
        if (send(w->fd, PING, PING_LEN, MSG_NOSIGNAL) != (ssize_t)PING_LEN) die("send");
        w->sent = seq + 1;
    }
    /* The replies still due, for up to a second. */
    int64_t stop = mono_ns() + 1000000000;
    while (w->replied < w->sent && mono_ns() < stop) {
        struct pollfd pfd = {w->fd, POLLIN, 0};
        struct timespec ts = {0, 10000000};
        if (ppoll(&pfd, 1, &ts, NULL) > 0) take_replies(w);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct_us(int64_t *v, size_t n, double p) {
    if (n == 0) return -1;
    size_t i = (size_t)(p * (double)(n - 1));
    return (double)v[i] / 1000.0;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: minprobe HOST PORT THREADS RATE_PER_THREAD SECONDS [SPIN_US]\n");
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), threads = atoi(argv[3]);
    double rate = atof(argv[4]), seconds = atof(argv[5]);
    int64_t spin_ns = argc > 6 ? (int64_t)(atof(argv[6]) * 1000) : 20000;
    int defer = argc > 7 ? atoi(argv[7]) : 0;
    if (port <= 0 || threads <= 0 || rate <= 0 || seconds <= 0) {
        fprintf(stderr, "minprobe: bad arguments\n");
        return 2;
    }
    size_t max_probes = (size_t)(rate * seconds) + 2;
    int64_t period_ns = (int64_t)(1e9 / rate);
    struct worker *ws = calloc((size_t)threads, sizeof(*ws));
    pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
    if (!ws || !tids) die("calloc");
    for (int i = 0; i < threads; i++) {
        struct worker *w = &ws[i];
        w->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (w->fd < 0) die("socket");
        struct sockaddr_in addr = {0};
        addr.sin_family = AF_INET;
        addr.sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
            fprintf(stderr, "minprobe: HOST must be an IPv4 address\n");
            return 2;
        }
        if (connect(w->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) die("connect");
        int on = 1;
        setsockopt(w->fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        setsockopt(w->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on));
        w->max_probes = max_probes;
        w->intended = calloc(max_probes, sizeof(int64_t));
        w->latency = calloc(max_probes, sizeof(int64_t));
        w->lag = calloc(max_probes, sizeof(int64_t));
        if (!w->intended || !w->latency || !w->lag) die("calloc");
        /* Touch the arrays now, so page faults are not part of the run. */
        memset(w->intended, 0, max_probes * sizeof(int64_t));
        memset(w->latency, 0, max_probes * sizeof(int64_t));
        memset(w->lag, 0, max_probes * sizeof(int64_t));
    }
    int64_t start = mono_ns() + 50000000;
    for (int i = 0; i < threads; i++) {
        struct worker *w = &ws[i];
        w->period_ns = period_ns;
        w->first_ns = start + period_ns * i / threads;
        w->end_ns = start + (int64_t)(seconds * 1e9);
        w->spin_ns = spin_ns;
        w->defer = defer;
        if (pthread_create(&tids[i], NULL, run, w) != 0) die("pthread_create");
    }
    size_t sent = 0, replied = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        sent += ws[i].sent;
        replied += ws[i].replied;
    }
    int64_t *lat = calloc(replied + 1, sizeof(int64_t)), *lag = calloc(sent + 1, sizeof(int64_t));
    if (!lat || !lag) die("calloc");
    size_t nl = 0, ng = 0;
    for (int i = 0; i < threads; i++) {
        memcpy(lat + nl, ws[i].latency, ws[i].replied * sizeof(int64_t));
        nl += ws[i].replied;
        memcpy(lag + ng, ws[i].lag, ws[i].sent * sizeof(int64_t));
        ng += ws[i].sent;
    }
    qsort(lat, nl, sizeof(int64_t), cmp);
    qsort(lag, ng, sizeof(int64_t), cmp);
    printf("sent=%zu replied=%zu lat_p50_us=%.1f lat_p99_us=%.1f lag_p50_us=%.1f lag_p99_us=%.1f "
           "lag_max_us=%.1f\n",
           sent, replied, pct_us(lat, nl, 0.5), pct_us(lat, nl, 0.99), pct_us(lag, ng, 0.5),
           pct_us(lag, ng, 0.99), ng ? (double)lag[ng - 1] / 1000.0 : -1.0);
    return replied == sent ? 0 : 1;
}
