// The demo workload: parses "requests" of varying size, sleeping a little
// between them, so the demo script has calls, arguments and latency to show.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long parse_request(const char *body, long len) {
  long sum = 0;
  for (long i = 0; i < len; i++) sum += body[i];
  return sum;
}

__attribute__((noinline)) void handle(const char *route, long len) {
  char *body = malloc(len);
  memset(body, 'x', len);
  parse_request(body, len);
  free(body);
  if (strcmp(route, "/slow") == 0) usleep(2000);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100;
  const char *routes[] = {"/index", "/api", "/slow", "/api"};
  // Touch the route strings first: a probe cannot fault in a page to read them.
  for (int i = 0; i < 4; i++) {
    volatile size_t len = strlen(routes[i]);
    (void)len;
  }
  for (int i = 0; i < n; i++) {
    handle(routes[i % 4], 64L << (i % 7));
    usleep(500);
  }
  printf("workload: handled %d requests\n", n);
  return 0;
}
