/* Workload for `-S offcpu=DUR` tests of which stack a block gets.
 *
 * The main thread blocks ROUNDS times in caller_a() and ROUNDS times in
 * caller_b(), strictly alternating (a, b, a, b, ...): both call the same
 * block_here() at the same depth, so only a stack taken for each block tells
 * them apart. Every block is a 3 ms nanosleep (at least the 1 ms threshold).
 * Meanwhile a second thread sleeps in doomed_sleep() until the process
 * exits: it is killed while blocked. At the end it writes to stderr:
 *   alternated rounds=N
 *
 * Usage: offcpu_callers [ROUNDS] (default 10)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void nap_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

__attribute__((noinline)) void block_here(void)
{
	nap_ms(3);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void caller_a(void)
{
	block_here();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void caller_b(void)
{
	block_here();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void doomed_sleep(void)
{
	nap_ms(60000);
	__asm__ volatile("" ::: "memory");
}

static void *doomed(void *unused)
{
	(void)unused;
	doomed_sleep();
	return NULL;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 10;
	pthread_t thread;

	if (pthread_create(&thread, NULL, doomed, NULL) != 0)
		return 1;
	for (long i = 0; i < rounds; i++) {
		caller_a();
		caller_b();
	}
	fprintf(stderr, "alternated rounds=%ld\n", rounds);
	/* Returning exits the process: the other thread dies blocked. */
	return 0;
}
