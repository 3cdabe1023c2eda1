/* The benchmark of wprof's CI regression recipe (README, "Catching
 * regressions in CI"): a server loop that handles REQUESTS requests.
 *
 * Each iteration calls request(i) (the span the recipe measures), then
 * compact(i) (housekeeping, outside the span), then sleeps 50 to 250 us.
 * Both functions hash a buffer for a number of rounds, so their cost is
 * work, not time: a slower machine makes both sides slower alike. Requests
 * are short (about 0.13 ms), so that few are interrupted, and many (10000
 * by default), so that the p99 of one run is the 100th longest request, not
 * a few outliers; at 4999 Hz the recipe's timer sampler takes about 3000
 * samples per run in compact(), at random moments (dither=4: a timer at a
 * fixed period under-samples what runs first after a wake-up, here
 * request(), and over-samples compact() by more the shorter request() is).
 * The recipe runs it at real-time priority.
 *
 * The sizes of requests and compactions (0.5 to 1.5 times their mean) and
 * the sleeps are random, the same sequence in every run. Fixed sizes would
 * fool a profiler's timer, which samples at a fixed rate: on a busy machine
 * a woken thread starts running right after the next interrupt, often the
 * sampler's own, so every iteration would start in step with the samples,
 * and compact() would get 10% too many or too few of them depending on
 * where request() ends. Sleeps end on time (timer slack 1 ns) for the same
 * reason: the kernel would end them on the next expiring timer.
 *
 *   --slow   request() does 15% more work and compact() 10% more
 *   --fast   request() does 15% less work
 *   -n N     requests (default 10000)
 *
 * At the end it prints its own measurements on stderr, for checking what
 * wprof reports against an independent count:
 *   requests N
 *   request I DURATION_NS          (one line per request, CLOCK_MONOTONIC)
 *   request_cpu_ns N               (CPU time in request(), CLOCK_THREAD_CPUTIME_ID)
 *   compact_cpu_ns N               (CPU time in compact())
 *   cpu_ns N                       (utime + stime from /proc/self/stat)
 *   sched_ns EXEC WAIT             (/proc/self/schedstat: time on the CPU
 *                                   and waiting for it, by the scheduler)
 *   steal_ns N                     (the machine's steal time over the run,
 *                                   all CPUs, from /proc/stat: time the
 *                                   hypervisor ran something else, which
 *                                   the scheduler leaves out of EXEC)
 *
 * Build: cc -O2 -g -fno-omit-frame-pointer -o bench bench.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/* Rounds of hashing per call: about 0.13 ms and 0.07 ms on a 2.5 GHz core
 * (uprobes and the timer sampler add about 0.04 ms to a request). */
#define REQUEST_ROUNDS 120000L
#define COMPACT_ROUNDS 60000L
/* Sleep between requests: THINK_MIN_US plus up to THINK_SPREAD_US. */
#define THINK_MIN_US 50L
#define THINK_SPREAD_US 200L

static unsigned char buffer[4096];

static long long now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long request_rounds = REQUEST_ROUNDS;
static long compact_rounds = COMPACT_ROUNDS;
static volatile uint64_t sink;

/* FNV-1a over the buffer, `rounds` bytes: one multiply per byte, so the
 * cost is linear in `rounds` and cannot be folded away by the compiler.
 * Inlined into each caller, so that timer samples land in request() and
 * compact() themselves. */
static inline __attribute__((always_inline)) uint64_t hash_rounds(uint64_t seed, long rounds)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;
	for (long k = 0; k < rounds; k++) {
		h ^= buffer[k & (sizeof(buffer) - 1)];
		h *= 0x100000001b3ULL;
	}
	return h;
}

__attribute__((noinline)) uint64_t request(long i, long size)
{
	return hash_rounds((uint64_t)i, size);
}

__attribute__((noinline)) uint64_t compact(long i, long size)
{
	return hash_rounds((uint64_t)i << 1, size);
}

/* xorshift64: the same sequence in every run. */
static uint64_t next_random(void)
{
	static uint64_t state = 88172645463325252ULL;
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}

/* `mean` scaled by a random factor in [0.5, 1.5). */
static long around(long mean)
{
	return mean / 2 + (long)(next_random() % 1024) * mean / 1024;
}

/* utime + stime (fields 14 and 15 of /proc/self/stat) in ns. */
static long long cpu_ns_from_proc(void)
{
	unsigned long utime = 0, stime = 0;
	char line[1024], *p;
	FILE *f = fopen("/proc/self/stat", "r");

	if (!f)
		return -1;
	if (!fgets(line, sizeof(line), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	/* The fields after the command name, which ends at the last ')'. */
	p = strrchr(line, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			 &utime, &stime) != 2)
		return -1;
	return (long long)(utime + stime) * (1000000000LL / sysconf(_SC_CLK_TCK));
}

/* The steal time of all CPUs (the 8th value of /proc/stat's "cpu" line) in
 * ns, or -1. */
static long long steal_ns_from_proc(void)
{
	unsigned long long steal = 0;
	FILE *f = fopen("/proc/stat", "r");
	int found;

	if (!f)
		return -1;
	found = fscanf(f, "cpu %*u %*u %*u %*u %*u %*u %*u %llu", &steal) == 1;
	fclose(f);
	if (!found)
		return -1;
	return (long long)steal * (1000000000LL / sysconf(_SC_CLK_TCK));
}

/* /proc/self/schedstat: the scheduler's time on the CPU (sum_exec_runtime)
 * and waiting on a run queue (run_delay), in ns. */
static void print_schedstat(void)
{
	unsigned long long exec = 0, wait = 0;
	FILE *f = fopen("/proc/self/schedstat", "r");

	if (f && fscanf(f, "%llu %llu", &exec, &wait) == 2)
		fprintf(stderr, "sched_ns %llu %llu\n", exec, wait);
	if (f)
		fclose(f);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench [--slow | --fast] [-n REQUESTS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long requests = 10000;

	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--slow")) {
			request_rounds = REQUEST_ROUNDS * 115 / 100;
			compact_rounds = COMPACT_ROUNDS * 110 / 100;
		} else if (!strcmp(argv[a], "--fast")) {
			request_rounds = REQUEST_ROUNDS * 85 / 100;
		} else if (!strcmp(argv[a], "-n") && a + 1 < argc) {
			requests = atol(argv[++a]);
		} else {
			usage();
		}
	}
	if (requests <= 0)
		usage();
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	for (size_t k = 0; k < sizeof(buffer); k++)
		buffer[k] = (unsigned char)(k * 7 + 3);
	long long *durations = calloc((size_t)requests, sizeof(*durations));
	if (!durations)
		return 1;
	long long request_cpu_ns = 0, compact_cpu_ns = 0;
	long long steal_at_start = steal_ns_from_proc();
	for (long i = 0; i < requests; i++) {
		long long start = now_ns(CLOCK_MONOTONIC);
		long long cpu = now_ns(CLOCK_THREAD_CPUTIME_ID);
		sink += request(i, around(request_rounds));
		long long between = now_ns(CLOCK_THREAD_CPUTIME_ID);
		durations[i] = now_ns(CLOCK_MONOTONIC) - start;
		request_cpu_ns += between - cpu;
		sink += compact(i, around(compact_rounds));
		compact_cpu_ns += now_ns(CLOCK_THREAD_CPUTIME_ID) - between;
		struct timespec think = {
			0, (THINK_MIN_US + (long)(next_random() % THINK_SPREAD_US)) * 1000L};
		nanosleep(&think, NULL);
	}
	fprintf(stderr, "requests %ld\n", requests);
	for (long i = 0; i < requests; i++)
		fprintf(stderr, "request %ld %lld\n", i, durations[i]);
	fprintf(stderr, "request_cpu_ns %lld\n", request_cpu_ns);
	fprintf(stderr, "compact_cpu_ns %lld\n", compact_cpu_ns);
	fprintf(stderr, "cpu_ns %lld\n", cpu_ns_from_proc());
	print_schedstat();
	long long steal_at_end = steal_ns_from_proc();
	if (steal_at_start >= 0 && steal_at_end >= 0)
		fprintf(stderr, "steal_ns %lld\n", steal_at_end - steal_at_start);
	free(durations);
	return 0;
}
