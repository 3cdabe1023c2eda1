/* A uprobe on a hot function: main alternates hot() and cold(), which do
 * the same amount of work on average (FNV-1a over a buffer), CALLS times
 * each, and measures the CPU time of each call itself
 * (CLOCK_THREAD_CPUTIME_ID around it, so hot()'s includes what its uprobe
 * costs the task). hot() starts with an instruction the kernel steps out of
 * line (`movabs`), not one it emulates (push, nop, branches).
 *
 * Each call runs a random number of rounds, from ROUNDS/2 to 3*ROUNDS/2:
 * calls of one fixed length repeat in step with the fixed period of a
 * sampling timer, which then samples them unevenly (docs/analysis.md,
 * "Timer samples and CPU time").
 *
 * Each iteration also times an empty window (two clock reads back to back):
 * the part of the reads inside hot()'s and cold()'s windows, which no
 * sample of either function sees, to subtract from both.
 *
 *   uprobe_hot CALLS ROUNDS
 *
 * At the end it prints on stdout:
 *   hot_cpu_ns N
 *   cold_cpu_ns N
 *   empty_cpu_ns N
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

/* xorshift64: the same lengths every run. */
static long random_rounds(uint64_t *state, long rounds)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return rounds / 2 + (long)(*state % (uint64_t)rounds);
}

int main(int argc, char **argv)
{
	if (argc != 3 || atol(argv[2]) < 1) {
		fprintf(stderr, "usage: uprobe_hot CALLS ROUNDS\n");
		return 2;
	}
	long calls = atol(argv[1]), rounds = atol(argv[2]);
	uint64_t state = 88172645463325252ULL;
	long long hot_ns = 0, cold_ns = 0, empty_ns = 0;
	for (long i = 0; i < calls; i++) {
		long hot_rounds = random_rounds(&state, rounds);
		long cold_rounds = random_rounds(&state, rounds);
		long long empty_start = cpu_ns();
		long long start = cpu_ns();
		sink += hot((uint64_t)i, hot_rounds);
		long long middle = cpu_ns();
		sink += cold((uint64_t)i, cold_rounds);
		long long end = cpu_ns();
		empty_ns += start - empty_start;
		hot_ns += middle - start;
		cold_ns += end - middle;
	}
	printf("hot_cpu_ns %lld\ncold_cpu_ns %lld\nempty_cpu_ns %lld\n", hot_ns, cold_ns, empty_ns);
	return 0;
}
