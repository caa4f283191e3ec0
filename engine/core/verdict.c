/*
** verdict.c: the lower half of a sandbox (sandbox.c builds the state, above namespace.c;
** this is what the files under it need): the host budget, the verdicts (kill, check),
** the count hook and the VM's ticks that enforce them, the pattern meter, and the tags
** a tool request and a read-only table carry.
*/
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lauxlib.h"
#include "lstate.h"   /* hookcount, CIST_HOOKYIELD */

#include "sandbox.h"

char tp__readonly_key;        /* marks the metatable of a read-only table */
/* A tool call yields a request tagged with this (sandbox.c's coroutines pass it through). */
char tp__request_tag;

/* ---- the host budget ------------------------------------------------------------ */

int tp__host_charge (tp_sandbox *sb, size_t n) {
  if (sb->host_cap && (n > sb->host_cap || sb->host_used > sb->host_cap - n)) {
    if (atomic_load(&sb->kill) == TP_KILL_NONE)
      snprintf(sb->kill_note, sizeof sb->kill_note, "the host memory built for the script "
               "(JSON, results, logs, call records) passed its budget of %zu bytes",
               sb->host_cap);
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    return -1;
  }
  sb->host_used += n;
  return 0;
}

void tp__host_refund (tp_sandbox *sb, size_t n) {
  sb->host_used = n < sb->host_used ? sb->host_used - n : 0;
}

/* ---- verdicts and the hook -------------------------------------------------------- */

/* tp__sandbox_of: sandbox.h (inline: sandbox.c's libraries call it on every use) */

void tp__sandbox_kill (tp_sandbox *sb, tp_kill why) {
  int expected = TP_KILL_NONE;
  atomic_compare_exchange_strong(&sb->kill, &expected, (int)why);
  lua_State *r = atomic_load(&sb->running);
  if (r) lua_sethook(r, tp__sandbox_hook, LUA_MASKCOUNT, 1);
}

int tp__sandbox_kill_note (tp_sandbox *sb, tp_kill why, const char *fmt, ...) {
  char note[sizeof sb->kill_note];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note, sizeof note, fmt, ap);
  va_end(ap);
  int expected = TP_KILL_NONE;
  if (!atomic_compare_exchange_strong(&sb->kill, &expected, (int)why)) return 0;
  memcpy(sb->kill_note, note, sizeof note);
  lua_State *r = atomic_load(&sb->running);
  if (r) lua_sethook(r, tp__sandbox_hook, LUA_MASKCOUNT, 1);
  return 1;
}

void tp__sandbox_check (lua_State *L, tp_sandbox *sb) {
  int why = atomic_load(&sb->kill);
  if (why != TP_KILL_NONE) {
    char msg[TP_KILL_NOTE_MAX];
    lua_sethook(L, tp__sandbox_hook, LUA_MASKCOUNT, 1);
    tp__kill_message(sb, (tp_kill)why, msg, sizeof msg);
    luaL_error(L, "%s", msg);
  }
}

/* The count hook period a thread needs when nothing is pending: up to the next
** instruction boundary (limit or step budget), 0 when nothing counts. */
static int hook_period (const tp_sandbox *sb) {
  uint64_t next = UINT64_MAX;
  if (sb->instr_limit) next = sb->instr_limit + 1;
  if (sb->instr_step_end && sb->instr_step_end < next) next = sb->instr_step_end;
  if (next == UINT64_MAX) return 0;
  uint64_t left = next > sb->instr_used ? next - sb->instr_used : 1;
  return left > 100000 ? 100000 : (int)left;
}

/* ---- the VM's ticks: the end of a time slice without a count hook ----------------
** While poll_end_ns is set, every tick_period-th tick (lua_patch.h) reads the clock.
** The period doubles while two reads are less than TP_TICK_NS apart and halves when
** they are more than 4 times that, so a tight loop pays a read every ~1 us and a loop
** whose body takes microseconds is looked at every iteration. Past the end the tick
** sets the count-1 hook, as the timer's signal would, and the hook yields. */
#define TP_TICK_NS 1000u
#define TICK_PERIOD_MAX 65536

void tp__sandbox_tick_arm (tp_sandbox *sb) {
  if (atomic_load_explicit(&sb->poll_end_ns, memory_order_relaxed) == 0)
    sb->meter.tickdown = TICK_OFF;
  else if (sb->meter.tickdown >= TICK_OFF / 2) {  /* off until now: from this moment */
    sb->tick_last_ns = 0;
    sb->meter.tickdown = sb->tick_period;
  }
}

void tp__sandbox_poll (tp_sandbox *sb, uint64_t end_ns) {
  atomic_store(&sb->poll_end_ns, end_ns);
  sb->tick_last_ns = 0;
  sb->meter.tickdown = end_ns ? sb->tick_period : TICK_OFF;
}

void tp__sandbox_meter_tick (lua_State *L, tp_meter *m) {
  tp_sandbox *sb = (tp_sandbox *)m;
  uint64_t end = atomic_load_explicit(&sb->poll_end_ns, memory_order_relaxed);
  if (end == 0) {
    m->tickdown = TICK_OFF;
    return;
  }
  uint64_t now = tp__now_ns();
  if (now >= end) {
    atomic_store(&sb->slice_over, 1);
    m->tickdown = TICK_OFF;     /* the hook takes it from here */
    tp__sandbox_charge(sb, L);  /* a count hook's partial period is not lost */
    tp__sandbox_count_hook(L, 1);
    return;
  }
  long p = sb->tick_period;
  if (sb->tick_last_ns) {
    uint64_t dt = now - sb->tick_last_ns;
    if (dt < TP_TICK_NS && p < TICK_PERIOD_MAX) p *= 2;
    else if (dt > 4 * TP_TICK_NS && p > 1) p /= 2;
    if (dt > end - now && p > 1) p = 1;  /* the next read might come after the end */
    sb->tick_period = p;
  }
  sb->tick_last_ns = now;
  m->tickdown = p;
}

/* Sets co's count hook to the period it needs now. A thread that yielded from the hook
** carries CIST_HOOKYIELD, and Lua then swallows the next count event whatever the
** period: every other step of an instruction budget ran twice its budget, uncounted.
** The mark only keeps a count-1 hook from running twice on one instruction, which our
** hook tolerates, so it is dropped here. */
/* Sets co's count hook to period. lua_sethook marks every Lua frame of the thread (its
** settraps walks the whole call chain), which a deep recursion made O(depth) at every
** hook and every signal: 5 s of a 200 ms run under ASan. When our count hook is on the
** thread already, every Lua frame is marked still (Lua clears a mark only when no line
** or count hook is set), so only the count needs setting: what lua_sethook itself
** writes, and as safe in a signal handler. */
/* One frame may have lost its mark all the same: luaG_traceexec reads the mask (0, the
** hook just cleared), the signal sets the hook and marks the frames, then the VM clears
** the running frame's mark by the mask it read. With the mask already ours, no later
** signal marked it again, and a loop that calls only C functions ran on past its wall
** limit. The topmost Lua frame is marked here every time: a frame called from it is
** marked at its entry, and one it returns to at the return. */
void tp__sandbox_count_hook (lua_State *co, int period) {
  if (co->hook == tp__sandbox_hook && co->hookmask == LUA_MASKCOUNT) {
    co->basehookcount = period;
    co->hookcount = period;
    for (CallInfo *ci = co->ci; ci != NULL; ci = ci->previous)
      if (isLua(ci)) {
        ci->u.l.trap = 1;
        break;
      }
  }
  else lua_sethook(co, tp__sandbox_hook, LUA_MASKCOUNT, period);
}

/* The timer's signal may come between tick_arm and the hook's write here: the count-1
** hook it set for the ticks' hand-over (or a verdict) is overwritten, and the ticks stay
** off, so the step ran on to its wall limit. Both are looked at again after the write
** (the handler only ever sets poll_end_ns, kill and slice_over; this thread clears them). */
void tp__sandbox_sethook (tp_sandbox *sb, lua_State *co) {
  int period = hook_period(sb);
  tp__sandbox_tick_arm(sb);
  co->ci->callstatus &= ~CIST_HOOKYIELD;
  if (period) tp__sandbox_count_hook(co, period);
  else lua_sethook(co, NULL, 0, 0);
  atomic_signal_fence(memory_order_seq_cst);
  tp__sandbox_tick_arm(sb);
  if (atomic_load(&sb->kill) != TP_KILL_NONE || atomic_load(&sb->slice_over))
    tp__sandbox_count_hook(co, 1);
}

/*
** Charges the instructions co has run since its count hook last fired or was set. A
** coroutine that returns or yields inside a period would otherwise run them free: a
** loop of short coroutines escaped the instruction limit. Not after a hook yield (the
** hook charged the period, and Lua leaves hookcount at 1).
*/
void tp__sandbox_charge (tp_sandbox *sb, lua_State *co) {
  if (!(sb->instr_limit || sb->instr_step_end) || sb->hook_yielded) return;
  if (co->hook != tp__sandbox_hook || !(co->hookmask & LUA_MASKCOUNT)) return;
  sb->instr_used += (uint64_t)(co->basehookcount - co->hookcount);
  co->hookcount = co->basehookcount;
  if (sb->instr_limit && sb->instr_used > sb->instr_limit)
    tp__sandbox_kill(sb, TP_KILL_INSTRUCTIONS);
}

void tp__sandbox_hook (lua_State *L, lua_Debug *ar) {
  tp_sandbox *sb = tp__sandbox_of(L);
  (void)ar;
  if (sb == NULL) return;
  if (sb->instr_limit || sb->instr_step_end)
    sb->instr_used += (uint64_t)lua_gethookcount(L);
  if (sb->instr_limit && sb->instr_used > sb->instr_limit)
    tp__sandbox_kill(sb, TP_KILL_INSTRUCTIONS);
  if (sb->fail_armed) tp__sandbox_kill(sb, TP_KILL_MEMORY);  /* see sb_alloc */
  tp__sandbox_check(L, sb);  /* raises on a verdict */
  if (sb->instr_step_end && sb->instr_used >= sb->instr_step_end)
    atomic_store(&sb->slice_over, 1);
  uint64_t poll_end = atomic_load_explicit(&sb->poll_end_ns, memory_order_relaxed);
  if (poll_end && tp__now_ns() >= poll_end) atomic_store(&sb->slice_over, 1);
  if (atomic_load(&sb->slice_over)) {
    if (lua_isyieldable(L)) {
      atomic_store(&sb->slice_over, 0);
      sb->instr_step_end = 0;
      atomic_store(&sb->poll_end_ns, 0);
      sb->hook_yielded = 1;
      tp__sandbox_sethook(sb, L);
      lua_yield(L, 0);
      return;
    }
    tp__sandbox_count_hook(L, 64);  /* try again soon */
    return;
  }
  tp__sandbox_sethook(sb, L);
}

/* The pattern meter: every METER_STEPS steps of the matcher, charge them as
** instructions and look at the verdict. */
void tp__sandbox_meter_refill (lua_State *L, tp_meter *m) {
  tp_sandbox *sb = (tp_sandbox *)m;
  m->countdown = METER_STEPS;
  if (sb->instr_limit) {
    sb->instr_used += METER_STEPS;
    if (sb->instr_used > sb->instr_limit) tp__sandbox_kill(sb, TP_KILL_INSTRUCTIONS);
  }
  tp__sandbox_check(L, sb);
}
