/* JIT workload: copies a counting loop into anonymous executable memory and
 * runs it, as a JIT runs the code it compiled; with a second argument it
 * also writes the perf map a JIT writes, /tmp/perf-PID.map, naming the code
 * `jit_spin`.
 * Usage: jit MS [map]   loops for MS milliseconds, then exits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "spin.h"

/* dec %rdi; jnz <dec>; ret */
static const unsigned char code[] = { 0x48, 0xff, 0xcf, 0x75, 0xfb, 0xc3 };

static int write_perf_map(const void *at)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
	FILE *map = fopen(path, "w");
	if (!map)
		return -1;
	fprintf(map, "%lx %zx jit_spin\n", (unsigned long)at, sizeof code);
	return fclose(map);
}

int main(int argc, char **argv)
{
	long end = now_ms() + (argc > 1 ? atol(argv[1]) : 1000);
	void *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return 1;
	memcpy(mem, code, sizeof code);
	if (mprotect(mem, 4096, PROT_READ | PROT_EXEC) != 0)
		return 1;
	if (argc > 2 && write_perf_map(mem) != 0)
		return 1;
	void (*spin)(long) = (void (*)(long))mem;
	while (now_ms() < end)
		spin(1000000);
	return 0;
}
