/* Workload for `-S offcpu=DUR` tests of blocks a SCHED_FIFO hog makes long.
 * The hog is a child process pinned to one CPU that spins HOG_MS (30 ms)
 * at FIFO priority 1, so nothing of normal priority runs there meanwhile.
 *
 * Usage: offcpu_fifo preempt
 *   The main thread, pinned to CPU 0, spins in user mode in spin_in_user()
 *   while the hog, on CPU 0 too, naps 5 ms: the nap's timer interrupt
 *   wakes the hog, which preempts the main thread outside any system call
 *   (the interrupt's saved registers say so) for ~30 ms.
 *   Writes "preempted" to stderr.
 *
 * Usage: offcpu_fifo exec
 *   A second thread, pinned to CPU 1, waits in pause(); the hog takes
 *   CPU 1; once it spins, the main thread (CPU 0) calls execve() of this program from
 *   exec_here(). execve must first end the second thread, which cannot run
 *   behind the hog: the main thread blocks inside execve ~30 ms, then the
 *   call returns into the new program, which naps 5 ms in after_exec(),
 *   writes "after exec" to stderr and lives 300 ms more.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HOG_MS 30

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set)) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static void nap_ms(long ms)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* What the hog and the waiter have done, in memory shared with the hog. */
struct progress {
	volatile int hog_ready, hog_spinning, waiter_ready, main_spinning;
};

static struct progress *progress;

/* Waits (1 ms naps) until `*flag` is set. */
static void await(volatile int *flag)
{
	while (!*flag)
		nap_ms(1);
}

/* Forks the hog: pinned to `cpu`, FIFO; it spins HOG_MS once `go` is
 * readable, or (go < 0) once the main thread spins and 5 ms more: the
 * timer interrupt of that nap wakes it while the CPU runs user code.
 * Returns once it is set up. */
static void start_hog(int cpu, int go, pid_t *hog)
{
	*hog = fork();
	if (*hog == 0) {
		char c;
		struct sched_param param = {.sched_priority = 1};
		pin(cpu);
		if (sched_setscheduler(0, SCHED_FIFO, &param)) {
			perror("sched_setscheduler");
			_exit(1);
		}
		progress->hog_ready = 1;
		if (go < 0) {
			await(&progress->main_spinning);
			nap_ms(5);
		} else if (read(go, &c, 1) != 1)
			_exit(1);
		progress->hog_spinning = 1;
		double end = now_ms() + HOG_MS;
		while (now_ms() < end)
			__asm__ volatile("" ::: "memory");
		_exit(0);
	}
	await(&progress->hog_ready);
}

__attribute__((noinline)) void spin_in_user(double until_ms)
{
	progress->main_spinning = 1;
	while (now_ms() < until_ms)
		__asm__ volatile("" ::: "memory");
}

static int preempt(void)
{
	pid_t hog;
	pin(0);
	start_hog(0, -1, &hog);
	spin_in_user(now_ms() + 3 * HOG_MS);
	waitpid(hog, NULL, 0);
	fprintf(stderr, "preempted\n");
	return 0;
}

static void *wait_on_cpu1(void *arg)
{
	(void)arg;
	pin(1);
	progress->waiter_ready = 1;
	for (;;)
		pause();
	return NULL;
}

__attribute__((noinline)) void exec_here(const char *self)
{
	char *argv[] = {(char *)self, "after", NULL};
	execv(self, argv);
	perror("execv");
	exit(1);
}

__attribute__((noinline)) void after_exec(void)
{
	nap_ms(5);
	fprintf(stderr, "after exec\n");
	/* Live on a while, so the recorder reads the new program's mappings. */
	nap_ms(300);
}

static int exec_behind_hog(const char *self)
{
	pthread_t waiter;
	pid_t hog;
	int go[2];
	pin(0);
	if (pipe(go))
		return 1;
	start_hog(1, go[0], &hog);
	if (pthread_create(&waiter, NULL, wait_on_cpu1, NULL))
		return 1;
	await(&progress->waiter_ready);
	nap_ms(1);
	if (write(go[1], "g", 1) != 1)
		return 1;
	/* Behind the spinning hog the waiter cannot exit. */
	await(&progress->hog_spinning);
	exec_here(self);
	return 1;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	progress = mmap(NULL, sizeof *progress, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (progress == MAP_FAILED)
		return 1;
	if (strcmp(mode, "preempt") == 0)
		return preempt();
	if (strcmp(mode, "exec") == 0)
		return exec_behind_hog(argv[0]);
	if (strcmp(mode, "after") == 0) {
		after_exec();
		return 0;
	}
	fprintf(stderr, "usage: offcpu_fifo preempt|exec\n");
	return 2;
}
