/* Workload for sampling tests: spin_here() burns CPU in a plain loop (no
 * calls, so timer samples land in it) and main calls it until the thread
 * has used MS milliseconds of CPU time (however long that takes on a busy
 * machine). Build with frame pointers and -O1.
 *
 * Usage: sys_spin [MS]   (default 1000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void spin_here(long iterations)
{
	for (long i = 0; i < iterations; i++)
		sink += (unsigned long)i;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int main(int argc, char **argv)
{
	long ms = argc > 1 ? atol(argv[1]) : 1000;
	long end = now_ms() + ms;

	while (now_ms() < end)
		spin_here(1000000);
	fprintf(stderr, "sys_spin done\n");
	return 0;
}
