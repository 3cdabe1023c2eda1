/* A uprobe on a hot function: main alternates hot() and cold(), which do
 * the same amount of work (FNV-1a over a buffer), CALLS times each, and
 * measures the CPU time of each call itself (CLOCK_THREAD_CPUTIME_ID around
 * it, so hot()'s includes what its uprobe costs the task). hot() starts
 * with an instruction the kernel steps out of line (`movabs`), not one it
 * emulates (push, nop, branches).
 *
 *   uprobe_hot CALLS ROUNDS
 *
 * At the end it prints on stdout:
 *   hot_cpu_ns N
 *   cold_cpu_ns N
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned char buffer[4096];
static volatile uint64_t sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Inlined into each caller, so that timer samples land in them. */
static inline __attribute__((always_inline)) uint64_t hash(uint64_t h, long rounds)
{
	for (long k = 0; k < rounds; k++) {
		h ^= buffer[k & (sizeof(buffer) - 1)];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Different seeds, so the compiler does not fold the two into one. */
__attribute__((noinline)) uint64_t hot(uint64_t seed, long rounds)
{
	return hash(0xcbf29ce484222325ULL ^ seed, rounds);
}

__attribute__((noinline)) uint64_t cold(uint64_t seed, long rounds)
{
	return hash(0x84222325cbf29ce4ULL ^ seed, rounds);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: uprobe_hot CALLS ROUNDS\n");
		return 2;
	}
	long calls = atol(argv[1]), rounds = atol(argv[2]);
	long long hot_ns = 0, cold_ns = 0;
	for (long i = 0; i < calls; i++) {
		long long start = cpu_ns();
		sink += hot((uint64_t)i, rounds);
		long long middle = cpu_ns();
		sink += cold((uint64_t)i, rounds);
		long long end = cpu_ns();
		hot_ns += middle - start;
		cold_ns += end - middle;
	}
	printf("hot_cpu_ns %lld\ncold_cpu_ns %lld\n", hot_ns, cold_ns);
	return 0;
}
