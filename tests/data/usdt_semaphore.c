/* Workload for USDT semaphore tests: a probe guarded by its semaphore, so it
 * fires only while a tracer has activated it in this process.
 *
 * Usage: usdt_semaphore [N]   N rounds 50 ms apart (default 40); in each,
 *   when wprof_gated_semaphore is set: wprof:gated(i), and "active i" on stderr.
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/sdt.h>

/* The semaphore <sys/sdt.h> tests; tracers increment it. */
unsigned short wprof_gated_semaphore __attribute__((section(".probes")));

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 40;

	for (int i = 0; i < n; i++) {
		if (wprof_gated_semaphore) {
			DTRACE_PROBE1(wprof, gated, i);
			fprintf(stderr, "active %d\n", i);
		}
		usleep(50000);
	}
	return 0;
}
