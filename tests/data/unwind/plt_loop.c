/* PLT workload: main calls labs (three instructions in the C library)
 * through its PLT stub in a tight loop, so timer samples land in the stub.
 * Built -fno-builtin, so the call is not inlined.
 * Usage: plt_loop [MS]   (default 1000): loops for MS milliseconds, then exits.
 */
#include <stdlib.h>

#include "spin.h"

int main(int argc, char **argv)
{
	long end = now_ms() + (argc > 1 ? atol(argv[1]) : 1000);
	while (now_ms() < end)
		for (int i = 0; i < 100000; i++)
			sink += (unsigned long)labs(i - 50000);
	return 0;
}
