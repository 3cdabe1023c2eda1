/* dlopen unwinding workload: waits until stdin closes or a line arrives,
 * dlopens LIB, prints "loaded", and spins in it: main -> run_library ->
 * lib_entry -> lib_middle -> lib_spin. Built -O2 -fomit-frame-pointer.
 * Usage: dlopen_main LIB MS
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

NOINLINE long run_library(void *lib, long ms)
{
	long (*entry)(long) = (long (*)(long))dlsym(lib, "lib_entry");
	if (!entry) {
		fprintf(stderr, "no lib_entry: %s\n", dlerror());
		exit(1);
	}
	long r = entry(ms);
	return r + 1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: dlopen_main LIB MS\n");
		return 2;
	}
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		line[0] = 0;
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	printf("loaded\n");
	fflush(stdout);
	long r = run_library(lib, atol(argv[2]));
	printf("done %ld\n", r > 0);
	return 0;
}
