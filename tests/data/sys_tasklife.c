/* Workload for task-life tests: forks N children that each exec /bin/true,
 * waits for them, renames itself to "wp_renamed" with prctl(PR_SET_NAME),
 * then sleeps 50 ms (so the children are freed before it exits).
 *
 * Usage: sys_tasklife [N]   (default 3)
 */
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	struct timespec nap = {.tv_sec = 0, .tv_nsec = 50 * 1000000L};

	for (int i = 0; i < n; i++) {
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		waitpid(child, NULL, 0);
	}
	prctl(PR_SET_NAME, "wp_renamed", 0, 0, 0);
	nanosleep(&nap, NULL);
	return 0;
}
