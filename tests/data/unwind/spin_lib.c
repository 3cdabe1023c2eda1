/* Shared library for the dlopen unwinding test: lib_entry -> lib_middle ->
 * lib_spin, built -O2 -fomit-frame-pointer -shared.
 */
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

NOINLINE long lib_spin(long end)
{
	long rounds = 0;
	while (now_ms() < end) {
		for (int i = 0; i < 200000; i++)
			sink += (unsigned long)i;
		rounds++;
	}
	return rounds;
}

NOINLINE long lib_middle(long end, long x)
{
	volatile long buf[24];
	buf[x & 15] = x;
	return lib_spin(end) + buf[(x + 1) & 15];
}

long lib_entry(long ms)
{
	return lib_middle(now_ms() + ms, ms) + 1;
}
