/*
** kvstore.c: the store behind the built-in kv.* tools (tools/kv.lua), in C so that
** several engines of one process can share it: `tidepool mcp` runs one engine per worker
** thread, and a user who writes a key in one call must read it in the next, whichever
** worker runs it. A store is reference counted and guarded by a mutex; keys and values
** are byte strings (values are JSON text made by kv.lua).
**
** Entries are kept in an array sorted by key (bytes, memcmp order), so get/set/delete
** are a binary search and list is a range scan. The store's byte cap (kv.lua's, at most
** 16 MiB of keys plus values) bounds the work of every step: a set or delete moves at most
** one pointer per entry (memmove), a list copies at most `limit` keys (<= 10000).
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lua.h"

#include "host.h"

typedef struct kv_entry {
  size_t klen, tlen;
  char *text;              /* tlen bytes; the key follows the struct */
  char key[];
} kv_entry;

struct tp_kvstore {
  atomic_int refs;
  pthread_mutex_t mu;
  kv_entry **v;            /* sorted by key */
  size_t n, cap;
  size_t used;             /* bytes of keys plus texts */
};

#define KV_MT "tidepool.kvstore"

tp_kvstore *tp__kvstore_new (void) {
  tp_kvstore *kv = calloc(1, sizeof *kv);
  if (kv == NULL) return NULL;
  if (pthread_mutex_init(&kv->mu, NULL) != 0) { free(kv); return NULL; }
  atomic_init(&kv->refs, 1);
  return kv;
}

void tp__kvstore_ref (tp_kvstore *kv) { atomic_fetch_add(&kv->refs, 1); }

void tp__kvstore_unref (tp_kvstore *kv) {
  if (kv == NULL || atomic_fetch_sub(&kv->refs, 1) != 1) return;
  for (size_t i = 0; i < kv->n; i++) { free(kv->v[i]->text); free(kv->v[i]); }
  free(kv->v);
  pthread_mutex_destroy(&kv->mu);
  free(kv);
}

static int key_cmp (const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  return c ? c : (alen > blen) - (alen < blen);
}

/* The index of key, or where it would go (*found 0). Caller holds the lock. */
static size_t find (const tp_kvstore *kv, const char *key, size_t klen, int *found) {
  size_t lo = 0, hi = kv->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = key_cmp(kv->v[mid]->key, kv->v[mid]->klen, key, klen);
    if (c == 0) { *found = 1; return mid; }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  *found = 0;
  return lo;
}

static tp_kvstore *check_store (lua_State *L) {
  return *(tp_kvstore **)luaL_checkudata(L, lua_upvalueindex(1), KV_MT);
}

/* get(key) -> text | nil. Nothing that can raise runs under the lock: the value's size
** is read first, a userdata of that size made, then the value copied into it (again if
** another engine changed it in between). */
static int kv_get (lua_State *L) {
  tp_kvstore *kv = check_store(L);
  size_t klen;
  const char *key = luaL_checklstring(L, 1, &klen);
  size_t room = 0, tlen = 0;
  char *buf = NULL;
  for (;;) {
    int found, fits = 0;
    pthread_mutex_lock(&kv->mu);
    size_t i = find(kv, key, klen, &found);
    if (found) {
      tlen = kv->v[i]->tlen;
      if (buf != NULL && tlen <= room) { memcpy(buf, kv->v[i]->text, tlen); fits = 1; }
    }
    pthread_mutex_unlock(&kv->mu);
    if (!found) { lua_pushnil(L); return 1; }
    if (fits) break;
    lua_settop(L, 1);
    room = tlen;
    buf = lua_newuserdatauv(L, room ? room : 1, 0);
  }
  lua_pushlstring(L, buf, tlen);
  return 1;
}

/* set(key, text, cap) -> true, used | false, used_after (over cap) */
static int kv_set (lua_State *L) {
  tp_kvstore *kv = check_store(L);
  size_t klen, tlen;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *text = luaL_checklstring(L, 2, &tlen);
  lua_Integer cap = luaL_checkinteger(L, 3);
  char *t = malloc(tlen ? tlen : 1);
  kv_entry *ne = malloc(sizeof *ne + klen);
  if (t == NULL || ne == NULL) {
    free(t);
    free(ne);
    return luaL_error(L, "the kv store is out of memory");
  }
  memcpy(t, text, tlen);
  ne->klen = klen;
  memcpy(ne->key, key, klen);
  int found, ok = 1;
  pthread_mutex_lock(&kv->mu);
  size_t i = find(kv, key, klen, &found);
  size_t after = kv->used - (found ? klen + kv->v[i]->tlen : 0) + klen + tlen;
  if ((lua_Integer)after > cap) ok = 0;
  else if (found) {
    free(kv->v[i]->text);
    kv->v[i]->text = t;
    kv->v[i]->tlen = tlen;
    t = NULL;
    kv->used = after;
  }
  else {
    if (kv->n == kv->cap) {
      size_t ncap = kv->cap ? kv->cap * 2 : 64;
      kv_entry **nv = realloc(kv->v, ncap * sizeof *nv);
      if (nv == NULL) ok = -1;
      else { kv->v = nv; kv->cap = ncap; }
    }
    if (ok == 1) {
      ne->text = t;
      ne->tlen = tlen;
      memmove(kv->v + i + 1, kv->v + i, (kv->n - i) * sizeof *kv->v);
      kv->v[i] = ne;
      kv->n++;
      kv->used = after;
      t = NULL;
      ne = NULL;
    }
  }
  size_t used = kv->used;
  pthread_mutex_unlock(&kv->mu);
  free(t);
  free(ne);
  if (ok < 0) return luaL_error(L, "the kv store is out of memory");
  lua_pushboolean(L, ok);
  lua_pushinteger(L, (lua_Integer)(ok ? used : after));
  return 2;
}

/* delete(key) -> whether it was set */
static int kv_delete (lua_State *L) {
  tp_kvstore *kv = check_store(L);
  size_t klen;
  const char *key = luaL_checklstring(L, 1, &klen);
  int found;
  kv_entry *old = NULL;
  pthread_mutex_lock(&kv->mu);
  size_t i = find(kv, key, klen, &found);
  if (found) {
    old = kv->v[i];
    kv->used -= old->klen + old->tlen;
    memmove(kv->v + i, kv->v + i + 1, (kv->n - i - 1) * sizeof *kv->v);
    kv->n--;
  }
  pthread_mutex_unlock(&kv->mu);
  if (old) { free(old->text); free(old); }
  lua_pushboolean(L, found);
  return 1;
}

/* list(prefix, limit) -> { keys... }, truncated. The keys are copied out under the lock
** (at most limit + 1 of them, limit <= 10000 in kv.lua's schema) and pushed after it. */
static int kv_list (lua_State *L) {
  tp_kvstore *kv = check_store(L);
  size_t plen;
  const char *prefix = luaL_optlstring(L, 1, "", &plen);
  lua_Integer limit = luaL_optinteger(L, 2, 1000);
  if (limit < 1) limit = 1;
  if (limit > 100000) limit = 100000;
  lua_settop(L, 2);
  lua_createtable(L, (int)(limit < 1024 ? limit : 1024), 0);  /* 3: keys */
  char **keys = malloc((size_t)limit * sizeof *keys);
  size_t *lens = malloc((size_t)limit * sizeof *lens);
  if (keys == NULL || lens == NULL) {
    free(keys);
    free(lens);
    return luaL_error(L, "the kv store is out of memory");
  }
  size_t n = 0;
  int truncated = 0, oom = 0, found;
  pthread_mutex_lock(&kv->mu);
  for (size_t i = find(kv, prefix, plen, &found); i < kv->n; i++) {
    const kv_entry *en = kv->v[i];
    if (en->klen < plen || memcmp(en->key, prefix, plen) != 0) break;
    if (n == (size_t)limit) { truncated = 1; break; }
    keys[n] = malloc(en->klen ? en->klen : 1);
    if (keys[n] == NULL) { oom = 1; break; }
    memcpy(keys[n], en->key, en->klen);
    lens[n++] = en->klen;
  }
  pthread_mutex_unlock(&kv->mu);
  int ok = !oom && lua_checkstack(L, 2);
  for (size_t i = 0; i < n; i++) {
    if (ok) {
      lua_pushlstring(L, keys[i], lens[i]);  /* host-state allocation: it has no cap */
      lua_rawseti(L, 3, (lua_Integer)i + 1);
    }
    free(keys[i]);
  }
  free(keys);
  free(lens);
  if (!ok) return luaL_error(L, "the kv store is out of memory");
  lua_pushboolean(L, truncated);
  return 2;
}

static int kv_gc (lua_State *L) {
  tp_kvstore **p = luaL_checkudata(L, 1, KV_MT);
  tp__kvstore_unref(*p);
  *p = NULL;
  return 0;
}

/* require("tidepool.kv") in the host state: the engine's shared store (e->kv), else a
** store of this state's own. */
int tp__kvstore_open (lua_State *L) {
  tp_kvstore *shared = lua_touserdata(L, lua_upvalueindex(1));
  tp_kvstore **p = lua_newuserdatauv(L, sizeof *p, 0);
  *p = NULL;
  if (luaL_newmetatable(L, KV_MT)) {
    lua_pushcfunction(L, kv_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (shared) { tp__kvstore_ref(shared); *p = shared; }
  else if ((*p = tp__kvstore_new()) == NULL) return luaL_error(L, "the kv store is out of memory");
  static const luaL_Reg fns[] = {
    { "get", kv_get }, { "set", kv_set }, { "delete", kv_delete }, { "list", kv_list },
    { NULL, NULL } };
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, -2);
  luaL_setfuncs(L, fns, 1);
  return 1;
}

/* ---- the public handle (tidepool.h): a store shared by engines ---------------------- */

tp_store *tp_store_create (void) { return (tp_store *)tp__kvstore_new(); }

void tp_store_destroy (tp_store *s) {
  if (s != NULL) tp__kvstore_unref((tp_kvstore *)s);
}
