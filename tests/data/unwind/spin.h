/* Shared by the unwinding workloads: a clock in milliseconds and a sink the
 * spinning loops write to, so the compiler keeps them.
 */
#include <time.h>

static volatile unsigned long sink;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Spins until the clock reaches `end`; returns the rounds spun. Inlined
 * into each leaf, so the leaf is the sampled frame. */
static inline long spin_until(long end)
{
	long rounds = 0;
	while (now_ms() < end) {
		for (int i = 0; i < 200000; i++)
			sink += (unsigned long)i;
		rounds++;
	}
	return rounds;
}
