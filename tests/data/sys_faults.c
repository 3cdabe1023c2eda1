/* Workload for counter tests: maps PAGES fresh anonymous pages, sleeps
 * 50 ms, touches them (one write each, no huge pages) in one on-CPU stretch,
 * then sleeps 100 ms, so the stretch between its two sleeps ends with at
 * least PAGES page faults.
 *
 * Usage: sys_faults [PAGES]   (default 2000)
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int pages = argc > 1 ? atoi(argv[1]) : 2000;
	long page = sysconf(_SC_PAGESIZE);
	struct timespec nap = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
	char *mem = mmap(NULL, (size_t)pages * page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (mem == MAP_FAILED)
		return 1;
	madvise(mem, (size_t)pages * page, MADV_NOHUGEPAGE);
	nap.tv_nsec = 50 * 1000000L;
	nanosleep(&nap, NULL);
	nap.tv_nsec = 100 * 1000000L;
	for (int i = 0; i < pages; i++)
		((volatile char *)mem)[(long)i * page] = 1;
	nanosleep(&nap, NULL);
	return 0;
}
