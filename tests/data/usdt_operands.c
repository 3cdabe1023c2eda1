/* Workload for USDT operand forms: arguments the compiler places in memory
 * operands with a scaled index (SIB: `-4@(%rdi,%rsi,4)`, `-8@8(%rdi,%rsi,8)`)
 * and relative to %rip (`-4@level(%rip)`), as gcc -O1 emits them.
 *
 * Usage: usdt_operands      fires wprof:sib, wprof:sib_disp and wprof:global 4 times each.
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 */
#include <stdio.h>
#include <sys/sdt.h>

/* Filled at run time: a probe reads only pages the process has touched. */
static int table[8];
static long big[8];
volatile int level = 7;

__attribute__((noinline)) void pick(const int *values, long i)
{
	DTRACE_PROBE1(wprof, sib, values[i]);
}

__attribute__((noinline)) void pick_next(const long *values, long i)
{
	DTRACE_PROBE1(wprof, sib_disp, values[i + 1]);
}

__attribute__((noinline)) void report(void)
{
	DTRACE_PROBE1(wprof, global, level);
}

int main(int argc, char **argv)
{
	(void)argv;
	for (int i = 0; i < 8; i++) {
		table[i] = 10 * (i + 1);
		big[i] = -(i + 1);
	}
	for (long i = 0; i < 4; i++) {
		pick(table, i + argc);
		pick_next(big, i + argc);
		level += 1;
		report();
	}
	fprintf(stderr, "usdt_operands done\n");
	return 0;
}
