/*
** lua_patch.h: force-included into Lua's own files (and read by the sandbox's). In
** lstrlib.c scripts/fetch-lua.sh has placed a call to tp_pattern_step at every step of the
** pattern matcher; lstate.c takes the seed of a state's string hashes from
** tp_lua_makeseed (below). The pattern steps: each call of match(), each character
** singlematch() tests and each character %b scans. That makes the work of find, match,
** gmatch and gsub countable,
** so a backtracking pattern can be stopped like a Lua loop, while every pattern that
** finishes behaves exactly as in unpatched Lua.
**
** lvm.c calls tp_vm_tick (below) at every backward jump and every entry into a Lua
** function, where a sandbox near the end of its time slice reads the clock.
**
** It is included before lprefix.h, so it includes no header. A state's extra space
** (LUA_EXTRASPACE, one pointer, copied into every new thread) holds a tp_meter for a
** sandbox state and NULL for any other state, where the step costs one test.
*/
#ifndef tidepool_lua_patch_h
#define tidepool_lua_patch_h

struct lua_State;

typedef struct tp_meter {
  long countdown;  /* steps left before refill() runs */
  void (*refill)(struct lua_State *L, struct tp_meter *m);  /* may raise */
  long tickdown;   /* VM ticks left before tick() runs */
  void (*tick)(struct lua_State *L, struct tp_meter *m);  /* never raises */
} tp_meter;

/* Lua never initializes the main thread's extra space (new threads copy it), so a state
** made by luaL_newstate would hand the matcher whatever malloc left there. This runs at
** the end of lua_newstate (lstate.c), before the state can run anything; a sandbox then
** stores its meter there. lua_getextraspace comes from lua.h, which lstate.c includes. */
#ifndef luai_userstateopen  /* engine files that include llimits.h first need not have it */
#define luai_userstateopen(L)  ((void)(*(void **)lua_getextraspace(L) = 0))
#endif

/* The seed of a new state's string hashes (lstate.c), which decides the order in which
** pairs() walks a table with string keys. A replayable run needs that order to be the
** same at every replay, in any process: replay.c sets tp_lua_seed_next (and _set) just
** before making such a run's state, on the thread that makes it, and the next
** lua_newstate of that thread takes it. Other states get a seed from addresses, which
** address-space randomization makes differ from process to process (Lua's own adds the
** time; this header may include no header). Weak: one variable however many objects
** define it. */
__attribute__((weak)) __thread unsigned int tp_lua_seed_next;
__attribute__((weak)) __thread int tp_lua_seed_next_set;
static inline unsigned int tp_lua_makeseed (void *L) {
  if (tp_lua_seed_next_set) {
    tp_lua_seed_next_set = 0;
    return tp_lua_seed_next;
  }
  unsigned long long x = (unsigned long long)(__SIZE_TYPE__)L;
  x ^= (unsigned long long)(__SIZE_TYPE__)&x << 13;
  x ^= (unsigned long long)(__SIZE_TYPE__)&tp_lua_makeseed << 29;
  x *= 0x9e3779b97f4a7c15ull;
  return (unsigned int)(x ^ (x >> 32));
}
#ifndef luai_makeseed
#define luai_makeseed(L) tp_lua_makeseed(L)
#endif

static inline void tp_pattern_step (struct lua_State *L) {
  tp_meter *m = *(tp_meter **)((char *)(L) - sizeof(void *));
  if (m != 0 && --m->countdown <= 0)
    m->refill(L, m);
}

/* A VM tick (scripts/fetch-lua.sh puts one in lvm.c): each backward jump and each entry
** into a Lua function, so no run of instructions between two ticks is longer than one
** function's straight-line code. tick() may set a hook (lua_sethook) and nothing else:
** the VM looks at its trap just after. */
static inline void tp_vm_tick (struct lua_State *L) {
  tp_meter *m = *(tp_meter **)((char *)(L) - sizeof(void *));
  if (m != 0 && --m->tickdown <= 0)
    m->tick(L, m);
}

#endif
