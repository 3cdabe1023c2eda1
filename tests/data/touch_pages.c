/* Workload for counter tests: touches a known number of fresh pages between
 * two probe-able calls, pinned to CPU 0 so per-CPU counters read at both
 * calls count the same CPU.
 *
 * Usage: touch_pages [PAGES]   (PAGES defaults to 256)
 *   before()   then PAGES page faults (one write per fresh anonymous page)
 *   after()
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((noinline)) void before(void) { __asm__ volatile(""); }
__attribute__((noinline)) void after(void) { __asm__ volatile(""); }

int main(int argc, char **argv)
{
	int pages = argc > 1 ? atoi(argv[1]) : 256;
	cpu_set_t cpu0;
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	if (sched_setaffinity(0, sizeof cpu0, &cpu0))
		return 1;
	long page = sysconf(_SC_PAGESIZE);
	char *mem = mmap(NULL, (size_t)pages * page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return 1;
	/* One fault per page: no transparent huge pages. */
	madvise(mem, (size_t)pages * page, MADV_NOHUGEPAGE);
	before();
	for (int i = 0; i < pages; i++)
		((volatile char *)mem)[(long)i * page] = 1;
	after();
	return 0;
}
