/* Workload for tracepoint differential tests: a known number of rarely used
 * syscalls, so system-wide tracepoints filtered by `pid == cpid` see exact counts.
 *
 * Usage: syscalls [N]   (N defaults to 5)
 *   getppid()                           N times
 *   getpgid(0)                          2 * N times
 *   openat(AT_FDCWD, PATH, O_RDONLY)    N times, PATH = "/dev/null" (then closed)
 *   openat(AT_FDCWD, PATH, O_WRONLY)    once (glibc open()), fd used for writes
 *   write(fd, buf, 10*i+1)              for i in 0..N
 *   getpriority(PRIO_PROCESS, 0)        3 times
 * Raw syscall(2) is used so libc caches cannot elide a call.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char DEV_NULL[] = "/dev/null";

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 5;
	static char buf[4096];
	long sum = 0;

	/* Fault in the path first: bpf_probe_read_user_str in a syscall tracepoint cannot
	 * page in memory, so a never-touched .rodata page would read as an empty string. */
	for (const volatile char *c = DEV_NULL; *c; c++)
		sum += *c == '/';

	for (int i = 0; i < n; i++)
		sum += syscall(SYS_getppid) > 0;
	for (int i = 0; i < 2 * n; i++)
		sum += syscall(SYS_getpgid, 0) > 0;
	for (int i = 0; i < n; i++) {
		int fd = (int)syscall(SYS_openat, AT_FDCWD, DEV_NULL, O_RDONLY);
		if (fd >= 0)
			close(fd);
	}
	int out = open(DEV_NULL, O_WRONLY);
	if (out < 0)
		return 1;
	for (int i = 0; i < n; i++)
		sum += syscall(SYS_write, out, buf, (size_t)(10 * i + 1));
	close(out);
	for (int i = 0; i < 3; i++)
		sum += syscall(SYS_getpriority, PRIO_PROCESS, 0) >= 0;
	fprintf(stderr, "syscalls done n=%d sum=%ld\n", n, sum);
	return 0;
}
