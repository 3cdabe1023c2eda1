/* Workload for `-S offcpu=DUR` tests: the main thread blocks SHORT_COUNT
 * times for SHORT_US in short_block() and LONG_COUNT times for LONG_MS in
 * long_block() (interleaved, one long block after every SHORT_COUNT /
 * LONG_COUNT short ones), both through glibc's nanosleep with a 1 ns timer
 * slack. It measures each kind of block itself: the wall time around the
 * calls minus the thread's CPU time in them is its time off the CPU, counted
 * only for calls in which the thread was switched out (on a loaded machine a
 * 10 us timer can expire before the thread reaches the scheduler, and the
 * call then never leaves the CPU), and at the end writes to stderr:
 *   short count=N blocked=B off_ns=T
 *   long count=N blocked=B off_ns=T
 *
 * Usage: offcpu_mix [SHORT_COUNT [SHORT_US [LONG_COUNT [LONG_MS]]]]
 *        (defaults: 2000 10 20 5)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>

struct blocks {
	long count;
	long blocked;
	long long off_ns;
};

static long long now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nap(long long ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
	nanosleep(&ts, NULL);
}

__attribute__((noinline)) void short_block(long long ns)
{
	nap(ns);
}

__attribute__((noinline)) void long_block(long long ns)
{
	nap(ns);
}

/* Runs `block(ns)` and adds its time off the CPU to `into`. */
static long switches(void)
{
	struct rusage usage;
	getrusage(RUSAGE_THREAD, &usage);
	return usage.ru_nvcsw + usage.ru_nivcsw;
}

static void measured(void (*block)(long long), long long ns, struct blocks *into)
{
	long before = switches();
	long long wall = now_ns(CLOCK_MONOTONIC);
	long long cpu = now_ns(CLOCK_THREAD_CPUTIME_ID);

	block(ns);
	cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	wall = now_ns(CLOCK_MONOTONIC) - wall;
	into->count++;
	if (switches() != before) {
		into->blocked++;
		into->off_ns += wall - cpu;
	}
}

int main(int argc, char **argv)
{
	long short_count = argc > 1 ? atol(argv[1]) : 2000;
	long short_us = argc > 2 ? atol(argv[2]) : 10;
	long long_count = argc > 3 ? atol(argv[3]) : 20;
	long long_ms = argc > 4 ? atol(argv[4]) : 5;
	long every = long_count > 0 ? short_count / long_count : 0;
	struct blocks shorts = {0, 0, 0}, longs = {0, 0, 0};

	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	for (long i = 0; i < short_count; i++) {
		measured(short_block, short_us * 1000LL, &shorts);
		if (every > 0 && (i + 1) % every == 0 && longs.count < long_count)
			measured(long_block, long_ms * 1000000LL, &longs);
	}
	while (longs.count < long_count)
		measured(long_block, long_ms * 1000000LL, &longs);
	fprintf(stderr, "short count=%ld blocked=%ld off_ns=%lld\n", shorts.count, shorts.blocked,
		shorts.off_ns);
	fprintf(stderr, "long count=%ld blocked=%ld off_ns=%lld\n", longs.count, longs.blocked,
		longs.off_ns);
	return 0;
}
