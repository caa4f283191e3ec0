/*
** bench_cli.c: the whole-process figure of `make bench`.
**
**   cli_run_ms     `tidepool run FILE` of a trivial script: spawn, run, exit, wait
**   spawn_true_ms  the same spawn and wait of /bin/true, measured alternately with it:
**                  what any process costs here, for comparison
**
** Medians. usage: bench_cli TIDEPOOL [runs]
*/
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

/* Spawns argv with stdout and stderr on /dev/null, waits; returns the elapsed ms, or
** a negative number when the process failed. */
static double timed_spawn (char *const argv[]) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  double t0 = (bench_now_us() / 1e3);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status;
  if (waitpid(pid, &status, 0) != pid) return -1;
  double t = (bench_now_us() / 1e3) - t0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? t : -1;
}

int main (int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: bench_cli TIDEPOOL [runs]\n"); return 2; }
  int n = argc > 2 ? atoi(argv[2]) : 200;
  if (n < 1) n = 1;
  char script[] = "/tmp/tidepool-bench-XXXXXX";
  int fd = mkstemp(script);
  if (fd < 0 || write(fd, "return 1\n", 9) != 9) { perror("bench_cli"); return 1; }
  close(fd);
  char verb[] = "run", true_path[] = "/bin/true";
  char *run[] = { argv[1], verb, script, NULL };
  char *tru[] = { true_path, NULL };
  double *a = malloc(sizeof(double) * (size_t)n), *b = malloc(sizeof(double) * (size_t)n);
  if (a == NULL || b == NULL) return 1;
  for (int i = 0; i < 10; i++) { timed_spawn(run); timed_spawn(tru); }  /* page cache */
  int bad = 0;
  for (int i = 0; i < n && !bad; i++) {
    a[i] = timed_spawn(run);
    b[i] = timed_spawn(tru);
    bad = a[i] < 0 || b[i] < 0;
  }
  unlink(script);
  if (bad) { fprintf(stderr, "bench_cli: %s run failed\n", argv[1]); return 1; }
  printf("cli_run_ms: %.2f ms\n", median(a, n));
  printf("spawn_true_ms: %.2f ms\n", median(b, n));
  free(a); free(b);
  return 0;
}
