/* Workload for the capture end-to-end test: a known number of mallocs from a
 * known function.
 *
 * Usage: capture_malloc
 *   make_blocks() calls malloc(3000 + i) exactly 7 times (i in 0..7), freeing
 *   each at once; then the process lingers 100 ms so a tracer can still read
 *   its mappings. No stdio at all: libc allocates nothing else, so
 *   `uprobe:libc:malloc /pid == cpid/` fires exactly 7 times.
 */
#include <stdlib.h>
#include <time.h>

#define BLOCKS 7

__attribute__((noinline)) long make_blocks(int n)
{
	long sum = 0;
	for (int i = 0; i < n; i++) {
		char *volatile p = malloc(3000 + (size_t)i);
		if (!p)
			return -1;
		p[0] = (char)i;
		sum += p[0];
		free(p);
	}
	return sum;
}

int main(void)
{
	long sum = make_blocks(BLOCKS);
	struct timespec linger = { 0, 100 * 1000 * 1000 };
	nanosleep(&linger, NULL);
	return sum == 21 ? 0 : 1;
}
