/* Workload for uprobe/uretprobe differential tests.
 *
 * Usage: uprobe_target [N [LINGER_MS]]   (N defaults to 5, LINGER_MS to 0)
 * LINGER_MS keeps the process alive after the calls, so a tracer that symbolizes
 * addresses lazily (bpftrace's `func` in uprobes) still finds the process.
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 *
 * Every traced function is noinline and its call count and arguments are a
 * pure function of N, so probe output is deterministic:
 *   add(i, 2 * i)            for i in 0..N        returns 3 * i
 *   mul3(i, -i, 1000 + i)    for i in 0..N        returns i * -i * (1000 + i)
 *   greet(WORDS[i % 4])      i + 1 times for each i in 0..N, returns strlen(word)
 *                            (so alpha, bravo, charlie, delta counts differ: no ties)
 *   answer()                 once                 returns 42
 *   alloc_block(64 * (i+1))  for i in 0..2N       calls malloc/free, returns its argument
 *   fib(10)                  once (recursive: 177 calls in total) returns 55
 *   negate(-7), negate(7)    twice                returns 7, -7
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile long sink;

static const char *const WORDS[] = {"alpha", "bravo", "charlie", "delta"};

NOINLINE int add(int a, int b)
{
	sink += a;
	return a + b;
}

NOINLINE long mul3(long a, long b, long c)
{
	sink += c;
	return a * b * c;
}

NOINLINE int greet(const char *who)
{
	sink += who[0];
	return (int)strlen(who);
}

NOINLINE int answer(void)
{
	sink += 1;
	return 42;
}

NOINLINE size_t alloc_block(size_t n)
{
	char *p = malloc(n);
	memset(p, 0, n);
	sink += p[n - 1] + (long)n;
	free(p);
	return n;
}

NOINLINE int fib(int n)
{
	sink += 1;
	if (n < 2)
		return n;
	return fib(n - 1) + fib(n - 2);
}

NOINLINE int negate(int x)
{
	sink += x;
	return -x;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 5;
	long linger_ms = argc > 2 ? atol(argv[2]) : 0;

	/* Fault in the strings first: a probe's bpf_probe_read_user cannot page in memory,
	 * so the first read of a never-touched .rodata page would return nothing. */
	for (int i = 0; i < 4; i++)
		sink += *(const volatile char *)WORDS[i];

	for (int i = 0; i < n; i++)
		add(i, 2 * i);
	for (int i = 0; i < n; i++)
		mul3(i, -i, 1000 + i);
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++)
			greet(WORDS[i % 4]);
	answer();
	for (int i = 0; i < 2 * n; i++)
		alloc_block(64 * (size_t)(i + 1));
	fib(10);
	negate(-7);
	negate(7);
	if (linger_ms > 0) {
		struct timespec ts = {linger_ms / 1000, (linger_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "uprobe_target done n=%d sink=%ld\n", n, (long)sink);
	return 0;
}
