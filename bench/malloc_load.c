/* malloc_load: a uprobe event source with varied user stacks, for bench/capture.sh.
 *
 * Usage: malloc_load CALLS
 *
 * Calls malloc/free CALLS times from 16 distinct call paths (recursion depth
 * 1..16 through non-inlined functions), so `uprobe:libc:malloc < stack >`
 * records real, repeating stacks rather than a single one.
 *
 * Prints one line:  calls=N seconds=F rate=F
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void leaf(size_t size)
{
	char *p = malloc(size);
	if (p)
		p[0] = 1;
	sink += (unsigned long)p;
	free(p);
}

__attribute__((noinline)) static void descend(int depth, size_t size)
{
	if (depth == 0)
		leaf(size);
	else
		descend(depth - 1, size);
	sink++; /* not a tail call: every level stays on the stack */
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CALLS\n", argv[0]);
		return 2;
	}
	long calls = atol(argv[1]);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < calls; i++)
		descend((int)(i % 16), 16 + (size_t)(i % 64) * 8);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double took = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
	printf("calls=%ld seconds=%.3f rate=%.0f\n", calls, took, calls / took);
	return 0;
}
