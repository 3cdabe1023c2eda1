/* Workload for metrics tests: REQUESTS calls of handle_request(i), each
 * spinning until it has used SPIN_MS of CPU time and then sleeping
 * (i % 4 + 1) ms. The program measures every call itself (CLOCK_MONOTONIC
 * around it) and writes to stderr, at the end:
 *   request I DURATION_NS      (one line per call)
 *   cpu_ns N                   (utime + stime of /proc/self/stat, in ns)
 *
 * Usage: prof_requests [REQUESTS [SPIN_MS]]   (defaults: 20 20)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static long long now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void handle_request(long i, long spin_ms)
{
	long long end = now_ns(CLOCK_THREAD_CPUTIME_ID) + spin_ms * 1000000LL;
	struct timespec nap = {0, (i % 4 + 1) * 1000000L};

	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int k = 0; k < 100000; k++)
			sink += (unsigned long)k;
	nanosleep(&nap, NULL);
}

/* utime + stime (fields 14 and 15 of /proc/self/stat) in ns. */
static long long cpu_ns_from_proc(void)
{
	unsigned long utime = 0, stime = 0;
	char line[1024], *p;
	FILE *f = fopen("/proc/self/stat", "r");

	if (!f || !fgets(line, sizeof(line), f))
		return -1;
	fclose(f);
	/* Fields after the command name, which ends at the last ')'. */
	for (p = line; *p; p++)
		;
	while (p > line && *p != ')')
		p--;
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
		return -1;
	return (long long)(utime + stime) * (1000000000LL / sysconf(_SC_CLK_TCK));
}

int main(int argc, char **argv)
{
	long requests = argc > 1 ? atol(argv[1]) : 20;
	long spin_ms = argc > 2 ? atol(argv[2]) : 20;
	long long *durations = calloc((size_t)requests, sizeof(*durations));

	if (!durations)
		return 1;
	for (long i = 0; i < requests; i++) {
		long long start = now_ns(CLOCK_MONOTONIC);
		handle_request(i, spin_ms);
		durations[i] = now_ns(CLOCK_MONOTONIC) - start;
	}
	for (long i = 0; i < requests; i++)
		fprintf(stderr, "request %ld %lld\n", i, durations[i]);
	fprintf(stderr, "cpu_ns %lld\n", cpu_ns_from_proc());
	return 0;
}
