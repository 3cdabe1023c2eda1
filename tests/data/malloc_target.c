/* Workload for library uprobes (`uprobe:libc:malloc`): known malloc calls.
 *
 * Usage: malloc_target
 *   malloc(1000 + i) exactly i + 1 times for each i in 0..5 (15 calls), each
 *   freed at once. No stdio: only write(2), so libc itself allocates nothing
 *   and the total number of malloc calls is exactly 15.
 */
#include <stdlib.h>
#include <unistd.h>

int main(void)
{
	long sum = 0;
	for (int i = 0; i < 5; i++) {
		for (int j = 0; j <= i; j++) {
			char *volatile p = malloc(1000 + (size_t)i);
			if (!p)
				return 1;
			p[0] = (char)j;
			sum += p[0];
			free(p);
		}
	}
	static const char done[] = "malloc_target done\n";
	return write(2, done, sizeof done - 1) == sizeof done - 1 ? (int)(sum & 0) : 1;
}
