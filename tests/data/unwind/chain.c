/* Unwinding workload: main -> a -> b -> c, each a real frame, spinning in c.
 *
 * Built -O2 -fomit-frame-pointer: no function keeps a frame pointer and b
 * uses rbp as a general register, so only .eh_frame can walk this stack.
 * Usage: chain [MS]   (default 1000): spins for MS milliseconds, then exits.
 */
#include <stdio.h>
#include <stdlib.h>

#include "spin.h"

#define NOINLINE __attribute__((noinline))

/* The leaf: spins until the deadline. */
NOINLINE long c(long end)
{
	return spin_until(end);
}

/* Keeps many values live across the call, so the compiler spills into
 * callee-saved registers, rbp included. */
NOINLINE long b(long end, long x)
{
	long v1 = x * 3, v2 = x * 5, v3 = x * 7, v4 = x * 11, v5 = x * 13, v6 = x * 17;
	volatile char pad[200];
	pad[x & 127] = (char)x;
	long r = c(end);
	return r + v1 + v2 + v3 + v4 + v5 + v6 + pad[(x + 1) & 127];
}

/* A frame of its own size (the array), returning after the call: no tail call. */
NOINLINE long a(long end, long x)
{
	volatile long buf[40];
	buf[x & 31] = x;
	long r = b(end, x + 1);
	return r + buf[(x + 3) & 31];
}

int main(int argc, char **argv)
{
	long ms = argc > 1 ? atol(argv[1]) : 1000;
	long r = a(now_ms() + ms, argc);
	printf("chain done %ld\n", r > 0);
	return 0;
}
