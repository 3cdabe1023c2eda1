/* Stacks through pending uretprobes: main calls nest(DEPTH), which recurses
 * down to nest(0), which spins (on CPU) and sleeps (off CPU). A uretprobe
 * on nest replaces the return address of every nest frame with the
 * [uprobes] trampoline while it runs: DEPTH + 1 instances pending at once,
 * recursive, so a walk through them takes each real return address from
 * the kernel's list, in order.
 * Usage: uretprobe_nest [ROUNDS [MS [DEPTH]]]   (defaults 20 rounds, 10 ms, 2)
 */
#include <stdlib.h>
#include <time.h>

#include "spin.h"

#define NOINLINE __attribute__((noinline, noipa))

/* Its own frame above nanosleep's (the result is used: no tail call), so
 * that a frame-pointer walk from libc's frameless wrapper loses this one,
 * not a nest frame. */
NOINLINE long nap(long ms)
{
	struct timespec length = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	return ms - nanosleep(&length, NULL);
}

/* Uses each callee's result after the call: no tail calls, every frame
 * stays. The innermost spins (spin_until, inlined) and naps. */
NOINLINE long nest(int depth, long ms)
{
	long result;
	if (depth > 0) {
		result = nest(depth - 1, ms);
	} else {
		result = spin_until(now_ms() + ms);
		result -= nap(ms);
	}
	sink += (unsigned long)result;
	return result + depth;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	long ms = argc > 2 ? atol(argv[2]) : 10;
	int depth = argc > 3 ? atoi(argv[3]) : 2;
	long total = 0;
	for (int i = 0; i < rounds; i++)
		total += nest(depth, ms);
	return total < 0;
}
