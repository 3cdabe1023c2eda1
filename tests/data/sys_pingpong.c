/* Workload for wakeup tests: threads "ping" and "pong" pass one byte back
 * and forth through two pipes N times, so each wakes the other N times.
 * Before starting it reads one byte (or EOF) from stdin, so a test can
 * start it, attach wprof with -p, and then let it go.
 *
 * Usage: sys_pingpong [N]   (default 200)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int n = 200;
static int to_pong[2], to_ping[2];

static void *pong(void *arg)
{
	char c;

	(void)arg;
	for (int i = 0; i < n; i++) {
		if (read(to_pong[0], &c, 1) != 1)
			exit(1);
		if (write(to_ping[1], &c, 1) != 1)
			exit(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t thread;
	char c = 'x';

	if (argc > 1)
		n = atoi(argv[1]);
	if (pipe(to_pong) || pipe(to_ping))
		return 1;
	(void)!read(0, &c, 1);
	if (pthread_create(&thread, NULL, pong, NULL))
		return 1;
	pthread_setname_np(thread, "pong");
	pthread_setname_np(pthread_self(), "ping");
	for (int i = 0; i < n; i++) {
		if (write(to_pong[1], &c, 1) != 1)
			return 1;
		if (read(to_ping[0], &c, 1) != 1)
			return 1;
	}
	pthread_join(thread, NULL);
	fprintf(stderr, "sys_pingpong done n=%d\n", n);
	return 0;
}
