/* Long-running workload for capture and replay tests: calls tick() at a
 * steady pace.
 *
 * Usage: capture_ticker N MS
 *   tick(i) for i in 0..N, sleeping MS milliseconds after each call, then
 *   exits. Writes nothing to stdout.
 */
#include <stdlib.h>
#include <time.h>

static volatile long sink;

__attribute__((noinline)) void tick(long i)
{
	sink += i;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10;
	long ms = argc > 2 ? atol(argv[2]) : 5;
	struct timespec pause = { ms / 1000, (ms % 1000) * 1000 * 1000 };
	for (long i = 0; i < n; i++) {
		tick(i);
		nanosleep(&pause, NULL);
	}
	return 0;
}
