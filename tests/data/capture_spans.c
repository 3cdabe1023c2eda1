/* Workload for span tests: calls of known duration, and jobs that overlap.
 *
 * Usage: capture_spans
 *   nap() sleeps 20 ms, called 5 times; each call's own duration
 *   (CLOCK_MONOTONIC around it) goes to stderr as `nap I NS` at the end.
 *   Then jobs on one thread: begin_job(1), +10 ms begin_job(2), +10 ms
 *   begin_job(3), +10 ms end_job(3), +10 ms end_job(2), +20 ms end_job(1),
 *   then end_job(99), which was never begun. Paired by job id the durations
 *   are 10, 30 and 60 ms; paired by thread they would differ.
 * Writes nothing to stdout.
 */
#include <stdio.h>
#include <time.h>

static volatile long sink;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000 * 1000 };
	while (nanosleep(&ts, &ts) != 0) {
	}
}

__attribute__((noinline)) void nap(void)
{
	sleep_ms(20);
	sink++;
}

__attribute__((noinline)) void begin_job(long id)
{
	sink += id;
}

__attribute__((noinline)) void end_job(long id)
{
	sink -= id;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void)
{
	long long naps[5];

	for (int i = 0; i < 5; i++) {
		long long start = now_ns();
		nap();
		naps[i] = now_ns() - start;
	}
	begin_job(1);
	sleep_ms(10);
	begin_job(2);
	sleep_ms(10);
	begin_job(3);
	sleep_ms(10);
	end_job(3);
	sleep_ms(10);
	end_job(2);
	sleep_ms(20);
	end_job(1);
	end_job(99);
	for (int i = 0; i < 5; i++)
		fprintf(stderr, "nap %d %lld\n", i, naps[i]);
	return 0;
}
