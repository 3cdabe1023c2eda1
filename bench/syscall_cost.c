/* syscall_cost: the CPU time of one system call, for bench/syscall_cost.sh.
 *
 * Usage: syscall_cost [ROUNDS] [CALLS]
 *
 * Calls getppid(2) CALLS times (default 200000) per round, ROUNDS rounds
 * (default 15), and prints the cheapest round's thread CPU time per call in
 * nanoseconds (CLOCK_THREAD_CPUTIME_ID). The minimum over rounds is the run
 * least disturbed by other work on the CPU, so it holds on a shared machine
 * where wall-clock slowdowns do not: a tracer that enables the system-call
 * tracepoints sends every call through the kernel's slow path, and the
 * difference to an untraced run is that path plus the tracer's programs.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double thread_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 15;
	long calls = argc > 2 ? atol(argv[2]) : 200000;
	double best = -1;

	if (rounds < 1 || calls < 1) {
		fprintf(stderr, "usage: syscall_cost [ROUNDS >= 1] [CALLS >= 1]\n");
		return 2;
	}
	for (int round = 0; round < rounds; round++) {
		double start = thread_ns();

		for (long i = 0; i < calls; i++)
			syscall(SYS_getppid);
		double per_call = (thread_ns() - start) / calls;
		if (best < 0 || per_call < best)
			best = per_call;
	}
	printf("%.1f\n", best);
	return 0;
}
