/* Workload for `-p PID` tests: waits for a go-file, then calls tick() N times.
 *
 * Usage: pid_target GO_FILE N
 *   Polls every 5 ms until GO_FILE exists (so a tracer can attach first), then
 *   tick(i) for i in 0..N, then exits. Two copies of this binary share the same
 *   uprobe (same inode and offset): only `-p` scoping tells them apart.
 * Writes nothing to stdout (stdout belongs to the tracer under test).
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long tick(long i)
{
	sink += i;
	return i;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	const char *go = argv[1];
	int n = atoi(argv[2]);
	struct timespec pause = {0, 5 * 1000000L};
	/* Give up after about 60 s so a failed test leaves no process behind. */
	for (int waited = 0; access(go, F_OK) != 0; waited++) {
		if (waited > 12000)
			return 3;
		nanosleep(&pause, NULL);
	}
	for (int i = 0; i < n; i++)
		tick(i);
	return 0;
}
