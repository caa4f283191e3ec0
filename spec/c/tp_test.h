/*
** tp_test.h: the C tests' harness. One file per area (spec/c/test_*.c), one TEST
** function per behaviour, named after what it proves. Each test prints "ok - name" or
** "not ok - name" with the failed checks under it; tp_test_end() prints
** "# N passed, M failed" (read by scripts/run-ctests.sh) and gives the exit status.
**
** A test file's main calls tp_test_args(argc, argv) first; then
**   build/tests/test_api                  runs every test of the file
**   build/tests/test_api cancel session   runs the tests whose name contains "cancel"
**                                         or "session"
**   build/tests/test_api --list           prints the names of its tests, runs nothing
** (arguments starting with "--" other than --list are the file's own, e.g. --bench).
**
** A test that leaves a libuv handle open on an engine's loop fails: tp_engine_destroy
** closes such handles (a program's leftovers) but counts them, and RUN compares the
** count before and after each test (tp__engine_open_handles, linked from the engine
** when the test links its internal archive). A test that leaves handles open on
** purpose says how many with TP_EXPECT_OPEN_HANDLES(n).
**
** A test that crashes or is killed (the runner's timeout sends SIGTERM) prints
** "not ok - name (signal N)" before the process dies, so the runner can name it.
*/
#ifndef tidepool_tp_test_h
#define tidepool_tp_test_h

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int tp_t_passed, tp_t_failed, tp_t_cur_failed, tp_t_list, tp_t_nfilters;
static char **tp_t_filters;
static const char *volatile tp_t_current;
static long tp_t_expected_handles;

/* In the engine's internal archive, absent from the public library (weak: NULL there).
** The number of handles tp_engine_destroy found open, over the process's life, and
** the types of the last ones through *what when not NULL. */
extern size_t tp__engine_open_handles(const char **what) __attribute__((weak));

#define TEST(name) static void name(void)

static inline int tp_t_selected (const char *name) {
  if (tp_t_nfilters == 0) return 1;
  for (int i = 0; i < tp_t_nfilters; i++)
    if (strstr(name, tp_t_filters[i]) != NULL) return 1;
  return 0;
}

static inline size_t tp_t_open_handles (const char **what) {
  return tp__engine_open_handles ? tp__engine_open_handles(what) : 0;
}

#define RUN(name) do { \
    if (!tp_t_selected(#name)) break; \
    if (tp_t_list) { printf("%s\n", #name); break; } \
    tp_t_cur_failed = 0; \
    tp_t_expected_handles = 0; \
    tp_t_current = #name; \
    size_t tp_h0_ = tp_t_open_handles(NULL); \
    name(); \
    const char *tp_what_ = ""; \
    long tp_dh_ = (long)(tp_t_open_handles(&tp_what_) - tp_h0_); \
    if (tp_dh_ != tp_t_expected_handles) \
      TP_FAIL_AT("%ld libuv handle(s) left open at tp_engine_destroy (expected %ld; " \
                 "the last: %s)", tp_dh_, tp_t_expected_handles, tp_what_); \
    tp_t_current = NULL; \
    if (tp_t_cur_failed) { tp_t_failed++; printf("not ok - %s\n", #name); } \
    else { tp_t_passed++; printf("ok - %s\n", #name); } \
    fflush(stdout); \
  } while (0)

/* The test leaves n handles open on purpose (checked by RUN). */
#define TP_EXPECT_OPEN_HANDLES(n) (tp_t_expected_handles += (n))

#define TP_FAIL_AT(...) do { \
    tp_t_cur_failed = 1; \
    printf("#   %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); \
  } while (0)

#define CHECK(cond) do { if (!(cond)) TP_FAIL_AT("CHECK(%s)", #cond); } while (0)

#define CHECK_INT(a, b) do { \
    long long tp_a_ = (long long)(a), tp_b_ = (long long)(b); \
    if (tp_a_ != tp_b_) TP_FAIL_AT("%s == %lld, expected %s == %lld", #a, tp_a_, #b, tp_b_); \
  } while (0)

#define CHECK_STR(a, b) do { \
    const char *tp_a_ = (a), *tp_b_ = (b); \
    if (tp_a_ == NULL || tp_b_ == NULL ? tp_a_ != tp_b_ : strcmp(tp_a_, tp_b_) != 0) \
      TP_FAIL_AT("%s is \"%s\", expected \"%s\"", #a, tp_a_ ? tp_a_ : "(null)", \
                 tp_b_ ? tp_b_ : "(null)"); \
  } while (0)

/* a contains b */
#define CHECK_HAS(a, b) do { \
    const char *tp_a_ = (a), *tp_b_ = (b); \
    if (tp_a_ == NULL || strstr(tp_a_, tp_b_) == NULL) \
      TP_FAIL_AT("%s is \"%s\", expected it to contain \"%s\"", #a, \
                 tp_a_ ? tp_a_ : "(null)", tp_b_); \
  } while (0)

/* Names the running test when the process dies of a signal, then dies of it. Only for
** signals left at their default action (AddressSanitizer's own handler stays). */
static void tp_t_on_signal (int sig) {
  const char *n = tp_t_current;
  char buf[300];
  int len = snprintf(buf, sizeof buf, "\nnot ok - %s (signal %d: %s)\n",
                     n ? n : "(between tests)", sig,
                     sig == SIGTERM ? "terminated, most likely by the runner's timeout"
                                    : "crashed");
  if (len > 0) {
    ssize_t w = write(1, buf, (size_t)len < sizeof buf ? (size_t)len : sizeof buf - 1);
    (void)w;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static inline void tp_test_args (int argc, char **argv) {
  static char *filters[64];
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--list") == 0) tp_t_list = 1;
    else if (strncmp(argv[i], "--", 2) != 0 && tp_t_nfilters < 64)
      filters[tp_t_nfilters++] = argv[i];
  }
  tp_t_filters = filters;
  static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM };
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO))
      signal(sigs[i], tp_t_on_signal);
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
}

static inline int tp_test_end (void) {
  if (tp_t_list) return 0;
  if (tp_t_nfilters > 0 && tp_t_passed + tp_t_failed == 0) {
    printf("not ok - no test of this file matches the name given\n");
    tp_t_failed++;
  }
  printf("# %d passed, %d failed\n", tp_t_passed, tp_t_failed);
  return tp_t_failed != 0;
}

#endif
