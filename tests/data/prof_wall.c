/* Workload for wall-clock profile tests: a thread named "worker" spins in
 * spin_here() until it has used SPIN_MS of CPU time (however long that
 * takes on a busy machine), then sleeps ROUNDS times NAP_MS through glibc's
 * nanosleep (clock_nanosleep underneath). The main thread only joins it.
 * At the end the worker's own measurements go to stderr:
 *   worker wall_ns=W cpu_ns=C
 * (its life from start to end on CLOCK_MONOTONIC, and its CPU time), so a
 * profile's on-CPU time is C and its off-CPU time W - C.
 *
 * Usage: prof_wall [SPIN_MS [ROUNDS [NAP_MS]]]   (defaults: 300 7 100)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long spin_ms = 300, rounds = 7, nap_ms = 100;
static volatile unsigned long sink;

static long long now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void spin_here(long iterations)
{
	for (long i = 0; i < iterations; i++)
		sink += (unsigned long)i;
}

static void *worker(void *arg)
{
	struct timespec nap = {.tv_sec = nap_ms / 1000, .tv_nsec = (nap_ms % 1000) * 1000000L};
	long long start = now_ns(CLOCK_MONOTONIC);
	long long cpu_end = now_ns(CLOCK_THREAD_CPUTIME_ID) + spin_ms * 1000000LL;

	(void)arg;
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < cpu_end)
		spin_here(200000);
	for (long i = 0; i < rounds; i++)
		nanosleep(&nap, NULL);
	fprintf(stderr, "worker wall_ns=%lld cpu_ns=%lld\n", now_ns(CLOCK_MONOTONIC) - start,
		now_ns(CLOCK_THREAD_CPUTIME_ID));
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t thread;

	if (argc > 1)
		spin_ms = atol(argv[1]);
	if (argc > 2)
		rounds = atol(argv[2]);
	if (argc > 3)
		nap_ms = atol(argv[3]);
	if (pthread_create(&thread, NULL, worker, NULL))
		return 1;
	pthread_setname_np(thread, "worker");
	pthread_join(thread, NULL);
	return 0;
}
