/* Workload that burns CPU for a fixed wall-clock time, for profile/interval probes.
 *
 * Usage: spinner [MS]   (default 300)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int main(int argc, char **argv)
{
	long ms = argc > 1 ? atol(argv[1]) : 300;
	long end = now_ms() + ms;

	while (now_ms() < end)
		for (int i = 0; i < 100000; i++)
			sink += (unsigned long)i;
	fprintf(stderr, "spinner done\n");
	return 0;
}
