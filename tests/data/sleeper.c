/* Workload that mostly sleeps: N iterations of nanosleep(MS milliseconds).
 *
 * Usage: sleeper [N [MS]]   (defaults: N = 5, MS = 20)
 * Each iteration is exactly one nanosleep syscall, so
 * `tracepoint:syscalls:sys_enter_nanosleep /pid == cpid/` fires N times
 * (glibc's nanosleep() uses clock_nanosleep, so the raw syscall is used).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 5;
	long ms = argc > 2 ? atol(argv[2]) : 20;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	for (int i = 0; i < n; i++)
		syscall(SYS_nanosleep, &ts, NULL);
	fprintf(stderr, "sleeper done n=%d ms=%ld\n", n, ms);
	return 0;
}
