/* Workload for per-thread profiles: threads "alpha" and "beta" each spin
 * in their own function (alpha_work, beta_work) until they have used MS
 * milliseconds of CPU time.
 *
 * Usage: prof_threads [MS]   (default 200)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static long ms = 200;
static volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void alpha_work(long iterations)
{
	for (long i = 0; i < iterations; i++)
		sink += (unsigned long)i;
}

__attribute__((noinline)) void beta_work(long iterations)
{
	for (long i = 0; i < iterations; i++)
		sink ^= (unsigned long)i;
}

static void *run(void *work)
{
	long long end = cpu_ns() + ms * 1000000LL;

	while (cpu_ns() < end)
		((void (*)(long))work)(200000);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t alpha, beta;

	if (argc > 1)
		ms = atol(argv[1]);
	if (pthread_create(&alpha, NULL, run, (void *)alpha_work) ||
	    pthread_create(&beta, NULL, run, (void *)beta_work))
		return 1;
	pthread_setname_np(alpha, "alpha");
	pthread_setname_np(beta, "beta");
	pthread_join(alpha, NULL);
	pthread_join(beta, NULL);
	return 0;
}
