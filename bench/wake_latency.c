/* wake_latency.c: what waking a sleeping thread costs on this machine, for the "10-pod overhead"
 * analysis in docs/benchmarks.md (issue 12). A by-selector request wakes more sleeping threads
 * than the same PromQL sent straight to Prometheus (the adapter's event thread, its worker, the
 * event thread again), so the price of one wake-up bounds what removing a hop can save.
 *
 * Two threads ping-pong over two eventfds (as the worker pool's resume does: write 8 bytes, the
 * other side wakes from a blocking read). One round trip is two wake-ups. Measured after an idle
 * gap of GAP microseconds before each ping (0: back to back, when a CPU may still be awake; 1000:
 * about what a request waits for Prometheus, long enough for an idle vCPU to halt), and with both
 * threads pinned to one CPU or to two. Prints the median and p90 of half a round trip, in µs.
 *
 *   cc -O2 -pthread bench/wake_latency.c -o wake_latency && ./wake_latency [ROUNDS]   */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct pair {
    int ping, pong;
    int cpu; /* the echo thread's CPU, -1: not pinned */
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Pins the calling thread to cpu; -1: lets it run on every online CPU again. */
static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu < 0) {
        for (long i = 0; i < sysconf(_SC_NPROCESSORS_ONLN) && i < CPU_SETSIZE; i++)
            CPU_SET((int)i, &set);
    } else {
        CPU_SET(cpu, &set);
    }
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *echo(void *arg)
{
    struct pair *p = arg;
    uint64_t v;
    if (pin(p->cpu) != 0)
        return NULL;
    for (;;) {
        if (read(p->ping, &v, sizeof(v)) != (ssize_t)sizeof(v))
            return NULL;
        if (v == UINT64_MAX - 1) /* stop */
            return NULL;
        if (write(p->pong, &v, sizeof(v)) != (ssize_t)sizeof(v))
            return NULL;
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* One case; 0 on success. */
static int run(const char *label, int my_cpu, int echo_cpu, int gap_us, int rounds)
{
    struct pair p = {eventfd(0, 0), eventfd(0, 0), echo_cpu};
    int64_t *rt = calloc((size_t)rounds, sizeof(*rt));
    pthread_t t;
    if (p.ping < 0 || p.pong < 0 || !rt || pthread_create(&t, NULL, echo, &p) != 0) {
        fprintf(stderr, "wake_latency: setup failed\n");
        return 1;
    }
    if (pin(my_cpu) != 0) {
        fprintf(stderr, "wake_latency: cannot pin to CPU %d\n", my_cpu);
        return 1;
    }
    uint64_t v = 1;
    int rc = 0;
    for (int i = 0; i < rounds + 100 && rc == 0; i++) { /* 100 warm-up rounds */
        if (gap_us > 0) {
            struct timespec gap = {0, (long)gap_us * 1000};
            while (nanosleep(&gap, &gap) != 0 && errno == EINTR) {
            }
        }
        int64_t t0 = now_ns();
        if (write(p.ping, &v, sizeof(v)) != (ssize_t)sizeof(v) ||
            read(p.pong, &v, sizeof(v)) != (ssize_t)sizeof(v))
            rc = 1;
        if (i >= 100)
            rt[i - 100] = now_ns() - t0;
    }
    uint64_t stop = UINT64_MAX - 1;
    if (write(p.ping, &stop, sizeof(stop)) != (ssize_t)sizeof(stop))
        rc = 1;
    pthread_join(t, NULL);
    if (rc == 0) {
        qsort(rt, (size_t)rounds, sizeof(*rt), cmp_i64);
        printf("| %s | %d | %.1f | %.1f |\n", label, gap_us, rt[rounds / 2] / 2e3,
               rt[rounds * 9 / 10] / 2e3);
    }
    free(rt);
    close(p.ping);
    close(p.pong);
    return rc;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    if (rounds < 10)
        rounds = 10;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("| threads | idle gap before each ping (µs) | one wake-up p50 (µs) | p90 (µs) |\n");
    printf("| --- | --- | --- | --- |\n");
    int rc = 0;
    for (int gap = 0; gap <= 1000 && rc == 0; gap += 1000) {
        rc |= run("both on CPU 0", 0, 0, gap, rounds);
        if (cpus > 1)
            rc |= run("CPU 0 and CPU 1", 0, 1, gap, rounds);
        rc |= run("not pinned", -1, -1, gap, rounds);
    }
    return rc;
}
