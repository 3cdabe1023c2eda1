/* Workload for the USDT constant-argument differential test: markers whose
 * arguments are compile-time constants of each integer width and sign, so the
 * note holds `N@$value` immediates (`4@$-202182160` for the uint32_t).
 *
 * Usage: usdt_constants
 *   wprof:u32(0xf3f2f1f0) wprof:s32 wprof:u16 wprof:s16 wprof:u8 wprof:s8, in that order
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 */
#include <stdint.h>
#include <stdio.h>
#include <sys/sdt.h>

#define VALUE 0xf7f6f5f4f3f2f1f0ull

int main(void)
{
	DTRACE_PROBE1(wprof, u32, (uint32_t)VALUE);
	DTRACE_PROBE1(wprof, s32, (int32_t)VALUE);
	DTRACE_PROBE1(wprof, u16, (uint16_t)VALUE);
	DTRACE_PROBE1(wprof, s16, (int16_t)VALUE);
	DTRACE_PROBE1(wprof, u8, (uint8_t)VALUE);
	DTRACE_PROBE1(wprof, s8, (int8_t)VALUE);
	fprintf(stderr, "usdt_constants done\n");
	return 0;
}
