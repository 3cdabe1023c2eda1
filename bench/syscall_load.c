/* syscall_load: a uprobe-free event source for bench/capture.sh.
 *
 * Usage: syscall_load THREADS SECONDS [RATE]
 *
 * THREADS threads call getppid(2) in a tight loop for SECONDS seconds, so that
 * tracepoint:syscalls:sys_enter_getppid fires as fast as the CPUs allow. With
 * RATE (calls per second, all threads together, 0 = unlimited) each thread
 * paces itself: after every batch of calls it sleeps until its schedule
 * (calls done / per-thread rate) catches up with the clock. The pacing is
 * absolute (from the start), so a late thread catches up rather than drifting.
 *
 * Prints one line:  calls=N seconds=F rate=F cpu=F
 * where N is the number of getppid calls made (each fires the tracepoint once)
 * and cpu is this process's own user + system time in seconds (getrusage), so a
 * caller timing the tracer with the load as its child can subtract it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64

static double seconds;
static double per_thread_rate;
static struct timespec start;

static double elapsed(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
}

static void sleep_until(double at)
{
	double t = start.tv_sec + start.tv_nsec / 1e9 + at;
	struct timespec ts = { (time_t)t, (long)((t - (time_t)t) * 1e9) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

static void *run(void *arg)
{
	uint64_t *calls = arg, n = 0;
	for (;;) {
		/* syscall(2) so that libc cannot cache or skip the call. */
		for (int i = 0; i < BATCH; i++)
			syscall(SYS_getppid);
		n += BATCH;
		double now = elapsed();
		if (now >= seconds)
			break;
		if (per_thread_rate > 0) {
			double due = n / per_thread_rate;
			if (due > now)
				sleep_until(due < seconds ? due : seconds);
		}
	}
	*calls = n;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: %s THREADS SECONDS [RATE]\n", argv[0]);
		return 2;
	}
	int threads = atoi(argv[1]);
	seconds = atof(argv[2]);
	double rate = argc == 4 ? atof(argv[3]) : 0;
	if (threads < 1 || threads > 64 || seconds <= 0 || rate < 0) {
		fprintf(stderr, "%s: bad arguments\n", argv[0]);
		return 2;
	}
	per_thread_rate = rate / threads;
	pthread_t tid[64];
	uint64_t calls[64] = { 0 };
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, run, &calls[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	uint64_t total = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		total += calls[i];
	}
	double took = elapsed();
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
		     ru.ru_stime.tv_usec / 1e6;
	printf("calls=%llu seconds=%.3f rate=%.0f cpu=%.3f\n", (unsigned long long)total, took,
	       total / took, cpu);
	return 0;
}
