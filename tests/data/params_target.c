/* Workload for uprobe parameter tests: typedef'd and qualified parameter
 * types (as `-lv` lists them), integers passed on the stack after the six
 * argument registers, and structs passed by value.
 *
 * Usage: params_target
 *   many(1, 2, 3, 4, 5, 6, 7, 8)             once: g and h are on the stack
 *   typed(3, "abc", 4, 5, &pair, &level)     once
 *   by_value(pair, big, GREEN, 9, argv)      once: pair {1, 2}, big {10, 20, 30, 40}
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

typedef struct pair { int a, b; } pair_t;
struct big { long x[4]; };
enum color { RED, GREEN };

/* Results go here, so no call is optimized away. */
static volatile long sink;

NOINLINE long many(int a, int b, int c, int d, int e, int f, int g, long h)
{
	sink += a + b + c + d + e + f + g + h;
	return sink;
}

NOINLINE size_t typed(size_t n, const char *s, uint8_t byte, unsigned long long wide,
		      const pair_t *const pair, const volatile int *level)
{
	sink += n + s[0] + byte + wide + pair->a + *level;
	return n;
}

NOINLINE long by_value(pair_t pair, struct big big, enum color color, int after, char **argv)
{
	sink += pair.a + big.x[1] + color + after + (argv[0] != NULL);
	return sink;
}

int main(int argc, char **argv)
{
	pair_t pair = {1, 2};
	struct big big = {{10, 20, 30, 40}};
	volatile int level = argc;

	many(1, 2, 3, 4, 5, 6, 7, 8);
	typed(3, "abc", 4, 5, &pair, &level);
	by_value(pair, big, GREEN, 9, argv);
	fprintf(stderr, "params_target done sink=%ld\n", (long)sink);
	return 0;
}
