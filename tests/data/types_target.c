/* Workload for C-type differential tests: passes pointers to structs with
 * known contents to probed functions.
 *
 * Usage: types_target
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 *
 *   inspect(&foo)     once, foo = {a 123, b "hello", c {1,2,3}, bf1 5, bf2 17,
 *                     y {{1,2},{3,4}}, next -> {a 7, b "world", ...}}
 *   values(&nums[0])  once, nums = {10, -20, 30, -40} (int16)
 *   describe(&bar, 'x', &count)  once, bar = {a 77, b "plain", c {7,8,9}}, count 13
 */
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

struct Foo {
	int a;
	char b[10];
	int c[3];
	unsigned int bf1 : 3, bf2 : 5;
	short y[2][2];
	struct Foo *next;
};

/* A struct bpftrace 0.17 also reads from DWARF (no bitfields). */
struct Bar {
	int a;
	char b[10];
	int c[3];
};

static volatile long sink;

NOINLINE int inspect(struct Foo *foo)
{
	sink += foo->a;
	return foo->a;
}

NOINLINE int values(short *nums)
{
	sink += nums[0];
	return nums[1];
}

NOINLINE int describe(struct Bar *bar, char tag, int *count)
{
	sink += bar->a + tag;
	return *count;
}

int main(void)
{
	struct Foo second = {7, "world", {4, 5, 6}, 1, 2, {{5, 6}, {7, 8}}, NULL};
	struct Foo first = {123, "hello", {1, 2, 3}, 5, 17, {{1, 2}, {3, 4}}, &second};
	short nums[4] = {10, -20, 30, -40};
	struct Bar bar = {77, "plain", {7, 8, 9}};
	int count = 13;

	inspect(&first);
	values(nums);
	describe(&bar, 'x', &count);
	fprintf(stderr, "types_target done sink=%ld\n", (long)sink);
	return 0;
}
