/* Off-CPU stacks of a frame-pointer-less syscall wrapper's caller: main
 * calls nap (a real frame), which calls nanosleep, ROUNDS times for MS ms,
 * spinning 1 ms after each. It sleeps first, right after the loader's
 * start-up: its first block's stack is taken before anything else of the
 * program ran in libc.
 * Usage: naps [ROUNDS [MS]]   (defaults 10 rounds of 20 ms)
 */
#include <stdlib.h>
#include <time.h>

#include "spin.h"

/* Uses nanosleep's result after the call: no tail call, so the frame stays. */
__attribute__((noinline)) long nap(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	long failed = nanosleep(&ts, NULL);
	sink += (unsigned long)failed;
	return failed;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 10;
	long ms = argc > 2 ? atol(argv[2]) : 20;
	long failed = 0;
	for (int i = 0; i < rounds; i++) {
		failed += nap(ms);
		spin_until(now_ms() + 1);
	}
	return failed != 0;
}
