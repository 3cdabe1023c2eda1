/* Shared library for the dlopen unwinding test: lib_entry -> lib_middle ->
 * lib_spin, built -O2 -fomit-frame-pointer -shared.
 */
#include "spin.h"

#define NOINLINE __attribute__((noinline))

NOINLINE long lib_spin(long end)
{
	return spin_until(end);
}

NOINLINE long lib_middle(long end, long x)
{
	volatile long buf[24];
	buf[x & 15] = x;
	return lib_spin(end) + buf[(x + 1) & 15];
}

long lib_entry(long ms)
{
	return lib_middle(now_ms() + ms, ms) + 1;
}
