/* Workload for usdt differential tests: one USDT marker fired a known number of times.
 *
 * Usage: usdt_target [N]   (N defaults to 5)
 *   wprof:tick(i, 10 * i)   for i in 0..N
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

static volatile long sink;

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 5;

	for (long i = 0; i < n; i++) {
		DTRACE_PROBE2(wprof, tick, i, 10 * i);
		sink += i;
	}
	fprintf(stderr, "usdt_target done n=%d sink=%ld\n", n, (long)sink);
	return 0;
}
