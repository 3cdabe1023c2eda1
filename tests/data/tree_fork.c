/* Workload for the command-tree filter (--only-command): the process forks
 * a child, which forks a grandchild; neither execs at first (they keep the
 * parent's name), each sleeps ROUNDS x 10 ms, then the grandchild execs
 * /bin/true. Every process prints "NAME PID" before it sleeps.
 *
 * Usage: tree_fork [ROUNDS]   (default 5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void naps(const char *who, int rounds)
{
	struct timespec nap = {.tv_sec = 0, .tv_nsec = 10 * 1000000L};

	printf("%s %d\n", who, (int)getpid());
	fflush(stdout);
	for (int i = 0; i < rounds; i++)
		nanosleep(&nap, NULL);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 5;
	pid_t child = fork();

	if (child < 0)
		return 1;
	if (child == 0) {
		pid_t grandchild = fork();
		if (grandchild < 0)
			_exit(1);
		if (grandchild == 0) {
			naps("grandchild", rounds);
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		naps("child", rounds);
		waitpid(grandchild, NULL, 0);
		_exit(0);
	}
	naps("parent", rounds);
	waitpid(child, NULL, 0);
	return 0;
}
