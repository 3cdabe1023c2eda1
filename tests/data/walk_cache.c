/* Workload for the off-CPU walk cache (`-S`: every switch-out walks the
 * user stack). The main thread blocks ROUNDS times alternately in
 * caller_a() and caller_b(): both call the same block_here() at the same
 * depth from the same frame of main, so each block starts from the same
 * pc, sp and bp and only the return address into its caller differs. Then
 * it blocks ROUNDS times in repeat_here() from one call site: the same
 * walk each time. Then it blocks ROUNDS times in turn in site_one() and in
 * site_two(), which calls nap() from a deeper frame (another sp): two
 * walks, each repeated every other block. Every block is a 1 ms nanosleep.
 * At the end it writes to stderr:
 *   alternated rounds=N
 *   repeated rounds=N
 *   two sites rounds=N
 *
 * Usage: walk_cache [ROUNDS] (default 100)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void nap(void)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000L};
	nanosleep(&ts, NULL);
}

__attribute__((noinline)) void block_here(void)
{
	nap();
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

__attribute__((noinline)) void repeat_here(void)
{
	nap();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void site_one(void)
{
	nap();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void site_two(void)
{
	volatile char deeper[256];

	deeper[0] = 1;
	nap();
	__asm__ volatile("" ::: "memory");
	(void)deeper[0];
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 100;

	for (long i = 0; i < rounds; i++) {
		caller_a();
		caller_b();
	}
	fprintf(stderr, "alternated rounds=%ld\n", rounds);
	for (long i = 0; i < rounds; i++)
		repeat_here();
	fprintf(stderr, "repeated rounds=%ld\n", rounds);
	for (long i = 0; i < rounds; i++) {
		site_one();
		site_two();
	}
	fprintf(stderr, "two sites rounds=%ld\n", rounds);
	return 0;
}
