/*
** tp_test.h: the C tests' harness. One file per area (spec/c/test_*.c), one TEST
** function per behaviour, named after what it proves. Each test prints "ok - name" or
** "not ok - name" with the failed checks under it; tp_test_end() prints
** "# N passed, M failed" (read by scripts/run-tests.sh) and gives the exit status.
*/
#ifndef tidepool_tp_test_h
#define tidepool_tp_test_h

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int tp_t_passed, tp_t_failed, tp_t_cur_failed;

#define TEST(name) static void name(void)

#define RUN(name) do { \
    tp_t_cur_failed = 0; \
    name(); \
    if (tp_t_cur_failed) { tp_t_failed++; printf("not ok - %s\n", #name); } \
    else { tp_t_passed++; printf("ok - %s\n", #name); } \
    fflush(stdout); \
  } while (0)

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

static inline int tp_test_end (void) {
  printf("# %d passed, %d failed\n", tp_t_passed, tp_t_failed);
  return tp_t_failed != 0;
}

#endif
