/* Workload for the command tree's pid reuse (--only-command): a member of
 * the tree exits, and an unrelated process gets its pid at once.
 *
 *   pid_reuse member FIFO ATTEMPTS   the command: ATTEMPTS times, forks a
 *                                    child that exits at once, reaps it,
 *                                    prints "member PID" and writes PID to
 *                                    FIFO, then waits 100 ms
 *   pid_reuse spawn FIFO             outside the tree, named "impostor":
 *                                    for each PID read from FIFO, sets
 *                                    /proc/sys/kernel/ns_last_pid to PID - 1
 *                                    and forks a child (likely given PID),
 *                                    which makes 200 system calls 20 us
 *                                    apart, then prints "ran CHILD NS"
 *                                    (CLOCK_MONOTONIC after its first
 *                                    call); prints "impostor CHILD PID";
 *                                    ends at EOF
 *
 * Start the spawner first: opening FIFO blocks until both ends are open.
 * Needs root (ns_last_pid).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap_us(long us)
{
	struct timespec nap = {.tv_sec = 0, .tv_nsec = us * 1000L};

	nanosleep(&nap, NULL);
}

static int member(const char *fifo, int attempts)
{
	FILE *out = fopen(fifo, "w");

	if (!out)
		return 1;
	for (int i = 0; i < attempts; i++) {
		pid_t child = fork();

		if (child < 0)
			return 1;
		if (child == 0)
			_exit(0);
		waitpid(child, NULL, 0);
		fprintf(out, "%d\n", (int)child);
		fflush(out);
		printf("member %d\n", (int)child);
		fflush(stdout);
		nap_us(100000);
	}
	fclose(out);
	return 0;
}

static void impostor(void)
{
	struct timespec first = {0, 0};

	for (int i = 0; i < 200; i++) {
		getppid();
		if (i == 0)
			clock_gettime(CLOCK_MONOTONIC, &first);
		nap_us(20);
	}
	printf("ran %d %lld\n", (int)getpid(),
	       (long long)first.tv_sec * 1000000000LL + first.tv_nsec);
	fflush(stdout);
	_exit(0);
}

static int spawn(const char *fifo)
{
	FILE *in;
	int pid;

	prctl(PR_SET_NAME, "impostor", 0, 0, 0);
	in = fopen(fifo, "r");
	if (!in)
		return 1;
	while (fscanf(in, "%d", &pid) == 1) {
		FILE *last = fopen("/proc/sys/kernel/ns_last_pid", "w");

		if (!last)
			return 1;
		fprintf(last, "%d", pid - 1);
		fclose(last);
		pid_t child = fork();

		if (child < 0)
			return 1;
		if (child == 0)
			impostor();
		printf("impostor %d %d\n", (int)child, pid);
		fflush(stdout);
		waitpid(child, NULL, 0);
	}
	fclose(in);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "member"))
		return member(argv[2], atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "spawn"))
		return spawn(argv[2]);
	fprintf(stderr, "usage: pid_reuse member FIFO ATTEMPTS | pid_reuse spawn FIFO\n");
	return 2;
}
