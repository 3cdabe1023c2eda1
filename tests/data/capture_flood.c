/* Workload for the drop accounting test: floods a tracepoint while nothing
 * drains the capture's ring buffer, and counts its calls exactly.
 *
 * Usage: capture_flood [N]   (N defaults to 1000000)
 * Started by wprof with -c, it stops its parent (wprof) with SIGSTOP, makes
 * N getppid syscalls (by default more 88-byte events than the largest ring
 * buffer, 64 MiB, holds), resumes the parent with SIGCONT and prints
 * `calls=C`: every getppid it made, including the first, which found the
 * parent.
 * Raw syscall(2) is used so no libc cache can elide a call.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	pid_t parent = (pid_t)syscall(SYS_getppid);
	long calls = 1;

	if (kill(parent, SIGSTOP) != 0) {
		perror("SIGSTOP the parent");
		return 1;
	}
	for (long i = 0; i < n; i++) {
		syscall(SYS_getppid);
		calls++;
	}
	if (kill(parent, SIGCONT) != 0) {
		perror("SIGCONT the parent");
		return 1;
	}
	printf("calls=%ld\n", calls);
	return 0;
}
