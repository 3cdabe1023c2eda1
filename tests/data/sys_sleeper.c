/* Workload for off-CPU tests: a thread named "napper" runs N rounds of a
 * short busy bit (~1 ms) followed by nanosleep(MS milliseconds) through
 * glibc (clock_nanosleep underneath). The main thread only joins it.
 *
 * Usage: sys_sleeper [N [MS]]   (defaults: N = 10, MS = 50)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int rounds = 10;
static long ms = 50;
static volatile unsigned long sink;

static long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000L;
}

static void *napper(void *arg)
{
	struct timespec nap = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	(void)arg;
	for (int i = 0; i < rounds; i++) {
		long end = now_us() + 1000;
		while (now_us() < end)
			sink++;
		nanosleep(&nap, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t thread;

	if (argc > 1)
		rounds = atoi(argv[1]);
	if (argc > 2)
		ms = atol(argv[2]);
	if (pthread_create(&thread, NULL, napper, NULL))
		return 1;
	pthread_setname_np(thread, "napper");
	pthread_join(thread, NULL);
	fprintf(stderr, "sys_sleeper done n=%d ms=%ld\n", rounds, ms);
	return 0;
}
