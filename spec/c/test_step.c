/*
** test_step.c: time-budgeted steps (tp_run_step with budget_us) and the interrupt
** signal, and the async driver's ready queue: a step ends and resumes exactly where it
** stopped, however often; a verdict recorded before the run is entered is honoured at
** entry; the signal picked with tp_set_signal is the one used; each stepping thread's
** timer goes when the thread does; only runs that can go on are queued; a far deadline
** waits in the engine's far list; a new run takes the sandbox chunks a destroyed one
** left to the engine. No timing is asserted, except a wall limit of 0.5 s that only the
** signal can enforce and one of 1.5 s reached from the far list (generous: the run must
** end, with limit.time, between 1.4 and 4 s). A step longer than TP_POLL_LEAD_NS is handed
** to the VM's ticks by the timer's signal; steps shared with a busy thread on one CPU must
** all yield (a lost hand-over ran the step on to the run's wall limit).
*/
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "engine.h"
#include "tp_test.h"

static const char spin[] = "local x = 0 while true do x = x + 1 end";

static tp_run *spinner (tp_engine *e) {
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = lim.cpu_us = 600u * 1000000u;
  return tp_run_create(e, spin, strlen(spin), &lim);
}

/* Must run first: the signal can only be picked before the handler is installed. */
TEST(the_chosen_signal_is_used_instead_of_sigurg) {
  int sig = SIGRTMIN + 2;
  CHECK_INT(tp_get_signal(), SIGURG);
  CHECK_INT(tp_set_signal(SIGKILL), TP_EINVAL);
  CHECK_INT(tp_set_signal(0), TP_EINVAL);
  CHECK_INT(tp_set_signal(sig), TP_OK);
  CHECK_INT(tp_get_signal(), sig);
  tp_engine *e = tp_engine_create();
  /* an endless loop with no step budget: only the signal can end it, at its wall limit */
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = 500000;
  char *env = NULL;
  int ok = 1;
  CHECK_INT(tp_engine_run(e, spin, strlen(spin), &lim, &env, &ok), TP_OK);
  CHECK_INT(ok, 0);
  CHECK_HAS(env, "\"code\":\"limit.time\"");
  tp_free(env);
  struct sigaction sa;
  CHECK_INT(sigaction(sig, NULL, &sa), 0);
  CHECK(sa.sa_flags & SA_SIGINFO);
  CHECK(sa.sa_sigaction != NULL);
  CHECK_INT(sigaction(SIGURG, NULL, &sa), 0);
  CHECK(!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL);
  CHECK_INT(tp_set_signal(SIGUSR1), TP_ESTATE);  /* installed: too late to change */
  CHECK_INT(tp_set_signal(sig), TP_OK);          /* the same one is no change */
  tp_engine_destroy(e);
}

TEST(a_budgeted_step_yields_and_resumes_a_thousand_times) {
  tp_engine *e = tp_engine_create();
  tp_run *r = spinner(e);
  int yields = 0;
  for (int i = 0; i < 1000; i++) yields += tp_run_step(r, 20, 0) == TP_YIELD;
  CHECK_INT(yields, 1000);
  tp_run_cancel(r);
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"cancelled\"");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

/* Stopped at arbitrary points (the hook), the script's state carries over exactly. */
TEST(a_script_stepped_in_slices_of_10_us_computes_what_it_computes_unstepped) {
  static const char src[] =
    "local t, s = {}, 0\n"
    "for i = 1, 200000 do t[i] = i * 2 end\n"
    "local co = coroutine.wrap(function () for i = 1, #t do s = s + t[i] end end)\n"
    "co()\n"
    "return s\n";
  tp_engine *e = tp_engine_create();
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int rc, steps = 0;
  while ((rc = tp_run_step(r, 10, 0)) == TP_YIELD) steps++;
  CHECK_INT(rc, TP_DONE);
  CHECK(steps > 0);
  CHECK_HAS(tp_run_envelope(r), "\"result\":40000200000");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

/* A short step ends where the VM ticks (lua_patch.h): at each backward jump and each
** entry into a Lua function, with no count hook. Each kind of endless loop a script can
** write ends a 50 us step, and a 1 ms one (whose end the timer hands to the ticks);
** without its tick it would run to its wall limit of 5 s and
** end with limit.time instead of yielding. */
TEST(every_kind_of_endless_loop_ends_a_short_step) {
  static const char *const loops[] = {
    "while true do end",
    "local x = 0 while x >= 0 do x = x + 1 end",
    "local t = {} repeat t.n = 1 until t.x",
    "::again:: goto again",
    "for i = 1, math.maxinteger do end",
    "for i = 1.0, math.huge do end",
    "for _ in function () return 1 end do end",
    "local function f () return f() end return f()",
    "local t = setmetatable({}, {__call = function (self) return self() end}) return t()",
    "coroutine.wrap(function () while true do end end)()",
    "local co = coroutine.wrap(function () while true do coroutine.yield() end end)\n"
    "while true do co() end",
    "while true do pcall(string.rep, 'x', 2) end",
  };
  tp_engine *e = tp_engine_create();
  for (size_t k = 0; k < sizeof loops / sizeof *loops; k++) {
    tp_limits lim;
    tp_limits_init(&lim);
    lim.wall_us = lim.cpu_us = 5u * 1000000u;
    tp_run *r = tp_run_create(e, loops[k], strlen(loops[k]), &lim);
    CHECK(r != NULL);
    int yields = 0;
    for (int i = 0; i < 20; i++) yields += tp_run_step(r, 50, 0) == TP_YIELD;
    /* a longer step: the timer hands its last 200 us to the ticks */
    for (int i = 0; i < 3; i++) yields += tp_run_step(r, 1000, 0) == TP_YIELD;
    if (yields != 23) fprintf(stderr, "  this loop did not yield: %s\n", loops[k]);
    CHECK_INT(yields, 23);
    tp_run_destroy(r);
  }
  tp_engine_destroy(e);
}

/* Budgets of both kinds in one step: whichever ends first ends it, and the next step
** starts clean (a slice end left over from the last step does not end it at once). */
TEST(time_and_instruction_budgets_together_then_none) {
  static const char src[] = "local n = 0 for i = 1, 3000000 do n = n + 1 end return n";
  tp_engine *e = tp_engine_create();
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  for (int i = 0; i < 50; i++) CHECK_INT(tp_run_step(r, 5, 1000), TP_YIELD);
  for (int i = 0; i < 50; i++) CHECK_INT(tp_run_step(r, 100000, 500), TP_YIELD);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":3000000");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

/* The race the entry check closes: the thread's timer fires (the run's wall deadline has
** passed) after the step's checks but before the run is entered, when no sandbox is
** active yet. The handler records the verdict; entering sets the stopping hook. */
TEST(an_interrupt_before_the_run_is_entered_is_honoured_at_entry) {
  tp_engine *e = tp_engine_create();
  tp_run *r = spinner(e);
  CHECK_INT(tp_run_step(r, 20, 0), TP_YIELD);  /* started; the handler is installed */
  tp_sandbox *sb = r->sb;
  lua_sethook(sb->T, NULL, 0, 0);
  tp_step_clock c;
  memset(&c, 0, sizeof c);
  c.sb = sb;
  c.deadline_ns = 1;                   /* long past: the timer fires at once */
  CHECK_INT(tp__step_timer_arm(&c), 0);
  CHECK_INT(atomic_load(&sb->kill), TP_KILL_TIME);
  CHECK(lua_gethook(sb->T) == NULL);   /* no sandbox active: nothing to hook yet */
  atomic_store(&sb->running, sb->T);
  tp__sandbox_enter(sb);
  CHECK(lua_gethook(sb->T) == tp__sandbox_hook);
  CHECK_INT(lua_gethookcount(sb->T), 1);
  tp__sandbox_leave();
  atomic_store(&sb->running, sb->L);
  tp__step_timer_disarm(&c);
  CHECK_INT(tp_run_step(r, 20, 0), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"limit.time\"");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

static int count_timers (void) {
  FILE *f = fopen("/proc/self/timers", "r");
  if (f == NULL) return -1;
  int n = 0;
  char line[256];
  while (fgets(line, sizeof line, f)) n += strncmp(line, "ID:", 3) == 0;
  fclose(f);
  return n;
}

static void *step_on_thread (void *arg) {
  tp_engine *e = arg;
  tp_run *r = spinner(e);
  int *rc = malloc(sizeof *rc);
  *rc = 0;
  for (int i = 0; i < 20; i++) *rc += tp_run_step(r, 20, 0) == TP_YIELD;
  tp_run_destroy(r);
  return rc;
}

/* Worker threads that step runs (the MCP server's) each get a timer; a thread that exits
** must not leave one behind, or a server that replaces its workers runs out of them. */
TEST(each_stepping_thread_timer_goes_when_the_thread_exits) {
  tp_engine *e = tp_engine_create();
  int before = count_timers();
  for (int i = 0; i < 100; i++) {
    pthread_t t;
    void *res = NULL;
    CHECK_INT(pthread_create(&t, NULL, step_on_thread, e), 0);
    CHECK_INT(pthread_join(t, &res), 0);
    CHECK(res != NULL && *(int *)res == 20);
    free(res);
  }
  CHECK(before >= 0);
  CHECK_INT(count_timers(), before);
  tp_engine_destroy(e);
}

static void count_done (tp_run *r, void *ud) { (void)r; (void)ud; }

/* Ten busy runs started at once: one poll used to step every one of them (ten slices,
** 50 ms and more, with no I/O in between); now it steps them until one slice's worth of
** time is used and returns, and the next polls carry on round-robin. */
TEST(one_poll_steps_busy_runs_for_about_one_slice_not_all_of_them) {
  tp_engine *e = tp_engine_create();
  tp_run *rv[10];
  for (int i = 0; i < 10; i++) {
    rv[i] = spinner(e);
    CHECK_INT(tp_run_start(rv[i], count_done, NULL), TP_OK);
  }
  tp_engine_poll(e, 0);
  int started_runs = 0;
  for (int i = 0; i < 10; i++) started_runs += rv[i]->state != ST_READY;
  CHECK(started_runs >= 1);
  CHECK(started_runs < 10);
  for (int p = 0; p < 40; p++) tp_engine_poll(e, 0);  /* every run gets its turns */
  for (int i = 0; i < 10; i++) CHECK(rv[i]->state == ST_STARTED);
  for (int i = 0; i < 10; i++) tp_run_destroy(rv[i]);
  tp_engine_destroy(e);
}

static int ndone;
static void note_end (tp_run *r, void *ud) { (void)r; (void)ud; ndone++; }
static void note_done (tp_run *r, void *ud) {
  (void)ud;
  ndone++;
  CHECK_HAS(tp_run_envelope(r), "\"ok\":true");
}

/* The driver's ready queue: runs that wait on a call leave it, so when all of them wait
** the queue is empty and the idle handle stops; completing one call queues that run
** alone, and the next poll finishes it without stepping the others. */
TEST(a_completed_call_queues_its_run_alone_and_waiting_runs_are_not_stepped) {
  enum { N = 100 };
  tp_engine *e = tp_engine_create();
  tp_tool_def def = { .name = "host.later" };
  CHECK_INT(tp_engine_add_tool(e, &def), TP_OK);
  static const char src[] = "return tools.host.later{}.n";
  tp_run *rv[N];
  ndone = 0;
  for (int i = 0; i < N; i++) {
    rv[i] = tp_run_create(e, src, sizeof src - 1, NULL);
    CHECK(rv[i] != NULL);
    CHECK_INT(tp_run_start(rv[i], note_done, NULL), TP_OK);
  }
  CHECK(e->ready->r == rv[0] && e->ready_tail->r == rv[N - 1]);
  for (int p = 0; p < 1000 && e->ready != NULL; p++) tp_engine_poll(e, 0);
  CHECK(e->ready == NULL && e->ready_tail == NULL);
  CHECK_INT(e->idle_on, 0);
  tp_call *calls[N];
  for (int i = 0; i < N; i++) CHECK_INT((int)tp_run_pending(rv[i], &calls[i], 1), 1);
  CHECK_INT(tp_call_complete(calls[57], "{\"n\":57}", 0), TP_OK);
  CHECK(e->ready->r == rv[57] && e->ready_tail->r == rv[57]);
  CHECK_INT(e->idle_on, 1);
  tp_engine_poll(e, 0);
  CHECK_INT(ndone, 1);
  CHECK(tp_run_done(rv[57]));
  CHECK_HAS(tp_run_envelope(rv[57]), "\"result\":57");
  CHECK(e->ready == NULL);
  for (int i = 0; i < N; i++) if (i != 57) CHECK(!tp_run_done(rv[i]));
  for (int i = 0; i < N; i++) if (i != 57) tp_call_complete(calls[i], "{\"n\":1}", 0);
  for (int p = 0; p < 1000 && ndone < N; p++) tp_engine_poll(e, 0);
  CHECK_INT(ndone, N);
  for (int i = 0; i < N; i++) tp_run_destroy(rv[i]);
  tp_engine_destroy(e);
}

#if defined(__SANITIZE_ADDRESS__)
#define ARENA_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_OFF 1
#endif
#endif

/* A destroyed run's sandbox chunks stay with the engine, and the next run takes them
** instead of fresh memory; the pool keeps at most its max. (No arena under ASan: there
** every block is malloc's, and the pool stays empty.) */
TEST(a_new_run_takes_the_chunks_a_destroyed_one_left) {
  tp_engine *e = tp_engine_create();
  static const char src[] = "local t = {} for i = 1, 2000 do t[i] = {i} end return #t";
  char *env = NULL;
  int ok = 0;
  CHECK_INT(e->core.chunks.n, 0);
  e->core.chunks.sandboxes_max = 0;  /* no pooled sandbox: each run makes its own */
  CHECK_INT(tp_engine_run(e, src, sizeof src - 1, NULL, &env, &ok), TP_OK);
  CHECK(ok);
  tp_free(env);
#ifdef ARENA_OFF
  CHECK_INT(e->core.chunks.n, 0);
#else
  size_t kept = e->core.chunks.n;
  CHECK(kept >= 2);                 /* {i} 2000 times: about 64 KiB of small blocks */
  tp_run *r = tp_run_create(e, "return 1", 8, NULL);
  CHECK(r != NULL);
  CHECK(e->core.chunks.n < kept);        /* the new sandbox took some */
  tp_run_destroy(r);
  CHECK_INT(e->core.chunks.n, kept);     /* and gave them back */
  e->core.chunks.max = 1;
  tp_run *r2 = tp_run_create(e, src, sizeof src - 1, NULL);
  CHECK_INT(tp_run_step(r2, 0, 0), TP_DONE);
  tp_run_destroy(r2);
  CHECK_INT(e->core.chunks.n, 1);        /* the max holds */
#endif
  tp_engine_destroy(e);
}

/* A run that waits on a call past which its wall limit is more than a second off waits
** in the engine's far list, with no timer of its own; it gets one when the limit nears,
** and ends with limit.time at it. */
TEST(a_far_deadline_waits_in_the_far_list_and_still_ends_the_run) {
  tp_engine *e = tp_engine_create();
  tp_tool_def def = { .name = "host.never" };
  CHECK_INT(tp_engine_add_tool(e, &def), TP_OK);
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = 1500000;
  lim.tool_timeout_us = 0;
  static const char src[] = "return tools.host.never{}";
  tp_run *r = tp_run_create(e, src, sizeof src - 1, &lim);
  CHECK(r != NULL);
  ndone = 0;
  uint64_t t0 = tp__now_ns();
  CHECK_INT(tp_run_start(r, note_end, NULL), TP_OK);
  for (int p = 0; p < 100 && e->ready != NULL; p++) tp_engine_poll(e, 0);
  tp__drv_run *d = r->host_data;  /* what the driver keeps for r */
  CHECK(d != NULL && d->in_far && e->far == d);
  CHECK(d->timer == NULL || !uv_is_active((uv_handle_t *)d->timer));
  while (!ndone && tp__now_ns() - t0 < 5000000000u) tp_engine_poll(e, 1);
  uint64_t took = tp__now_ns() - t0;
  CHECK_INT(ndone, 1);
  CHECK(!d->in_far && e->far == NULL);
  CHECK(!uv_is_active((uv_handle_t *)e->far_timer));  /* keeps the loop no longer */
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"limit.time\"");
  CHECK(took >= 1400000000u && took < 4000000000u);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

/* A thread that wakes every few microseconds on the stepping thread's CPU, so that the
** stepping thread is preempted at arbitrary points, among them those between arming its
** timer and entering the script. */
static atomic_int hog_stop;

static void *hog (void *arg) {
  volatile unsigned long x = 0;
  struct timespec nap = { 0, 1000 };
  (void)arg;
  while (!atomic_load(&hog_stop)) {
    for (int i = 0; i < 20000; i++) x++;
    nanosleep(&nap, NULL);
  }
  return NULL;
}

/* Steps of 250 us: the timer hands the last 200 us to the VM's ticks (tp__sandbox_poll
** through the signal's hook). A signal that came after the step armed its timer but before
** it entered the script, or while the hook was being rewritten, or as a coroutine was being
** resumed, left the ticks off: the step ran on to the run's wall limit (73 of 100000 steps
** here with such a neighbour). Each run gets a wall limit of 5 s and 200 steps (50 ms of
** budget): every step must yield. */
TEST(a_step_handed_to_the_ticks_ends_even_when_its_thread_is_preempted) {
  static const char *const srcs[] = {
    "local x = 0 while true do x = x + 1 end",
    "local co = coroutine.wrap(function () local x = 0 while true do x = x + 1 end end) co()",
  };
  cpu_set_t old, one;
  int pinned = sched_getaffinity(0, sizeof old, &old) == 0 && sched_getcpu() >= 0;
  if (pinned) {
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    pinned = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  atomic_store(&hog_stop, 0);
  pthread_t t;
  CHECK_INT(pthread_create(&t, NULL, hog, NULL), 0);  /* inherits the one CPU */
  tp_engine *e = tp_engine_create();
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = lim.cpu_us = 5u * 1000000u;
  int yields = 0, steps = 0;
  char first_end[200] = "";
  for (int k = 0; k < 40; k++) {
    const char *src = srcs[k % 2];
    tp_run *r = tp_run_create(e, src, strlen(src), &lim);
    for (int i = 0; i < 200; i++, steps++) {
      int rc = tp_run_step(r, 250, 0);
      yields += rc == TP_YIELD;
      if (rc != TP_YIELD) {
        if (first_end[0] == 0 && tp_run_envelope(r))
          snprintf(first_end, sizeof first_end, "%s", tp_run_envelope(r));
        break;
      }
    }
    tp_run_destroy(r);
  }
  atomic_store(&hog_stop, 1);
  pthread_join(t, NULL);
  if (pinned) sched_setaffinity(0, sizeof old, &old);
  tp_engine_destroy(e);
  CHECK_STR(first_end, "");
  CHECK_INT(yields, 8000);
  CHECK_INT(steps, 8000);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(the_chosen_signal_is_used_instead_of_sigurg);
  RUN(a_budgeted_step_yields_and_resumes_a_thousand_times);
  RUN(a_script_stepped_in_slices_of_10_us_computes_what_it_computes_unstepped);
  RUN(every_kind_of_endless_loop_ends_a_short_step);
  RUN(time_and_instruction_budgets_together_then_none);
  RUN(an_interrupt_before_the_run_is_entered_is_honoured_at_entry);
  RUN(each_stepping_thread_timer_goes_when_the_thread_exits);
  RUN(one_poll_steps_busy_runs_for_about_one_slice_not_all_of_them);
  RUN(a_completed_call_queues_its_run_alone_and_waiting_runs_are_not_stepped);
  RUN(a_new_run_takes_the_chunks_a_destroyed_one_left);
  RUN(a_far_deadline_waits_in_the_far_list_and_still_ends_the_run);
  RUN(a_step_handed_to_the_ticks_ends_even_when_its_thread_is_preempted);
  return tp_test_end();
}
