/* The stack-trust workload of issue 12: main alternates spin_here (on CPU)
 * and sleep_here (off CPU in nanosleep), each a real frame.
 * Built with frame pointers for the kernel-side checks and -O2
 * -fomit-frame-pointer for the unwinder's.
 * Usage: spin_sleep [ROUNDS [MS]]   (defaults 20 rounds of 10 ms each way)
 */
#include <stdlib.h>
#include <time.h>

#include "spin.h"

#define NOINLINE __attribute__((noinline))

NOINLINE long spin_here(long ms)
{
	return spin_until(now_ms() + ms);
}

/* Uses nanosleep's result after the call: no tail call, so the frame stays. */
NOINLINE long sleep_here(long ms)
{
	struct timespec nap = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	long failed = nanosleep(&nap, NULL);
	sink += (unsigned long)failed;
	return failed;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	long ms = argc > 2 ? atol(argv[2]) : 10;
	long spun = 0;
	for (int i = 0; i < rounds; i++) {
		spun += spin_here(ms);
		spun -= sleep_here(ms);
	}
	return spun < 0;
}
