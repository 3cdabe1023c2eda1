/* A command whose stacks run into the C library only after wprof read its
 * mappings (at the end of its exec, before the loader mapped libc), and
 * which exits before they can be read again: issue 12's short-lived
 * command, made deterministic by its test (which stops wprof meanwhile).
 *
 * Built -O2 -fomit-frame-pointer -nostartfiles: its own _start (outermost
 * in its CFI) calls main, so nothing it runs before the burst walks through
 * a C library frame (the loader's start-up aside) and asks for its
 * mappings to be read again. main writes "ready PID" and waits for a line
 * on stdin (raw system calls), then sorts with qsort for MS milliseconds,
 * comparing in compare_slowly, and exits at once (exit_group).
 * Usage: libc_burst MS
 */
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

__asm__(".text\n"
	".globl _start\n"
	".type _start, @function\n"
	"_start:\n"
	".cfi_startproc\n"
	".cfi_undefined rip\n"
	"	xor %ebp, %ebp\n"
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call start_main\n"
	"	hlt\n"
	".cfi_endproc\n");

static volatile unsigned long sink;

static long sys3(long number, long a, long b, long c)
{
	long result;
	__asm__ volatile("syscall"
			 : "=a"(result)
			 : "a"(number), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return result;
}

/* Spins a little on each comparison, so samples land here (called from
 * qsort) and in qsort itself. */
NOINLINE static int compare_slowly(const void *a, const void *b)
{
	for (int i = 0; i < 2000; i++)
		sink += (unsigned long)i;
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

NOINLINE static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

NOINLINE static long burst(long ms)
{
	long values[64], rounds = 0;
	long end = now_ms() + ms;
	while (now_ms() < end) {
		for (int i = 0; i < 64; i++)
			values[i] = (i * 7919 + rounds) % 64;
		qsort(values, 64, sizeof values[0], compare_slowly);
		rounds++;
	}
	return rounds;
}

/* Decimal digits of `text` (no C library call before the burst). */
static long parse(const char *text)
{
	long value = 0;
	while (*text >= '0' && *text <= '9')
		value = value * 10 + (*text++ - '0');
	return value;
}

NOINLINE int main(int argc, char **argv)
{
	long ms = argc > 1 ? parse(argv[1]) : 100;
	char line[32] = "ready ";
	char digits[16];
	int n = 0, at = 6;
	for (long pid = sys3(SYS_getpid, 0, 0, 0); pid > 0 || n == 0; pid /= 10)
		digits[n++] = (char)('0' + pid % 10);
	while (n > 0)
		line[at++] = digits[--n];
	line[at++] = '\n';
	sys3(SYS_write, 1, (long)line, at);
	sys3(SYS_read, 0, (long)line, sizeof line);
	sink += (unsigned long)burst(ms);
	sys3(SYS_exit_group, 0, 0, 0);
	return 0;
}

NOINLINE void start_main(long *sp)
{
	main((int)sp[0], (char **)(sp + 1));
}
