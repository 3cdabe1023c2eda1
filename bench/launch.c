/* launch: run a tracer and time it, for bench/compare.sh.
 *
 * Usage: launch start MARKER -- TOOL ARGS...
 *        launch exit  MARKER -- TOOL ARGS...
 *
 * Forks TOOL with stdout on a pipe, timestamps the launch (CLOCK_MONOTONIC, just
 * before fork) and reads the pipe until a line contains MARKER.
 *   start: the time to MARKER is the start-up cost (the tool prints MARKER from
 *          BEGIN, which runs once every probe is attached). Then SIGINT ends the tool.
 *   exit:  the tool exits on its own after printing MARKER (exit() in a probe); the
 *          time from reading MARKER to the child's exit is the exit cost.
 * Prints one line:  start_ms=F exit_ms=F maxrss_kb=N sigints=N
 * (exit_ms is the SIGINT-to-exit time in start mode; SIGINT is sent 200 ms after
 * MARKER, once the tool is idle, and again every 5 s until the tool exits:
 * sigints counts them, and exit_ms runs from the first.) maxrss_kb is the tool's peak RSS
 * from wait4(2). Exits non-zero, with a message on stderr, if MARKER never appears,
 * the tool fails, or 30 s pass.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t child = -1;
/* Seconds since SIGINT was sent (-1: not yet), since launch, SIGINTs resent. */
static volatile sig_atomic_t since_sigint = -1, seconds, nudges;
/* A tool that got SIGINT exits well within this; past it, the signal was lost. */
#define SIGINT_RESEND_S 5

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Every second: after 30, give up; SIGINT_RESEND_S after SIGINT, send it
 * again (bpftrace 0.17 loses a SIGINT that lands outside its epoll_wait). */
static void on_alarm(int sig)
{
	(void)sig;
	if (++seconds < 30) {
		if (since_sigint >= 0 && ++since_sigint >= SIGINT_RESEND_S && child > 0) {
			kill(child, SIGINT);
			since_sigint = 0;
			nudges++;
		}
		alarm(1);
		return;
	}
	if (child > 0)
		kill(child, SIGKILL);
	static const char msg[] = "launch: timed out after 30 s\n";
	(void)!write(2, msg, sizeof msg - 1);
	_exit(3);
}

/* Reads from fd until a line contains marker; returns 0 when found, -1 on EOF. */
static int read_until(int fd, const char *marker)
{
	static char buf[1 << 16];
	size_t len = 0;

	for (;;) {
		ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
		if (n <= 0)
			return -1;
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, marker))
			return 0;
		/* Keep only the unfinished last line, so the buffer never fills up. */
		char *nl = strrchr(buf, '\n');
		if (nl) {
			len = strlen(nl + 1);
			memmove(buf, nl + 1, len + 1);
		}
		if (len >= sizeof buf - 1)
			len = 0;
	}
}

static void drain(int fd)
{
	char buf[4096];
	while (read(fd, buf, sizeof buf) > 0)
		;
}

int main(int argc, char **argv)
{
	if (argc < 5 || strcmp(argv[3], "--") != 0 ||
	    (strcmp(argv[1], "start") != 0 && strcmp(argv[1], "exit") != 0)) {
		fprintf(stderr, "usage: launch start|exit MARKER -- TOOL ARGS...\n");
		return 2;
	}
	int start_mode = strcmp(argv[1], "start") == 0;
	const char *marker = argv[2];
	int fds[2];
	if (pipe(fds) != 0) {
		perror("pipe");
		return 2;
	}
	signal(SIGALRM, on_alarm);
	alarm(1);

	double t_launch = now_ms();
	child = fork();
	if (child < 0) {
		perror("fork");
		return 2;
	}
	if (child == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execvp(argv[4], argv + 4);
		perror("exec");
		_exit(127);
	}
	close(fds[1]);

	if (read_until(fds[0], marker) != 0) {
		fprintf(stderr, "launch: %s exited before printing \"%s\"\n", argv[4], marker);
		waitpid(child, NULL, 0);
		return 1;
	}
	double t_marker = now_ms();
	if (start_mode) {
		/* bpftrace 0.17 notices SIGINT only when it interrupts its epoll_wait
		 * (or with its next event): a signal that lands while it is still
		 * printing MARKER is lost on a quiet program and it never exits.
		 * Let the tool go idle first; the exit time counts from the signal. */
		usleep(200 * 1000);
		kill(child, SIGINT);
		since_sigint = 0;
	}
	double t_signal = now_ms();
	drain(fds[0]);

	int status;
	struct rusage ru;
	if (wait4(child, &status, 0, &ru) < 0) {
		perror("wait4");
		return 2;
	}
	double t_exit = now_ms();
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "launch: %s ended with status 0x%x\n", argv[4], status);
		return 1;
	}
	printf("start_ms=%.3f exit_ms=%.3f maxrss_kb=%ld sigints=%d\n", t_marker - t_launch,
	       t_exit - (start_mode ? t_signal : t_marker), ru.ru_maxrss, 1 + (int)nudges);
	return 0;
}
