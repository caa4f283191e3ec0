/*
** store_open.c: the public tp_store_open, which picks a backend (store_memory.c,
** store_sqlite.c, store_redis.c) from a location. Above the backends, which call
** store.c's shared parts: apart from store.c so that no two files call each other.
*/
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "store_int.h"

tp_store *tp_store_open (const char *where, char *err, size_t errlen) {
  char dummy[1];
  if (err == NULL || errlen == 0) { err = dummy; errlen = sizeof dummy; }
  err[0] = '\0';
  if (where == NULL || where[0] == '\0') {
    snprintf(err, errlen, "no state location given (a directory, sqlite:PATH or "
             "redis://HOST:PORT/DB)");
    return NULL;
  }
  if (strncmp(where, "redis://", 8) == 0 || strncmp(where, "rediss://", 9) == 0) {
    return tp__store_redis_open(where, err, errlen);
  }
  if (strncmp(where, "memory:", 7) == 0 && where[7] == '\0') {
    tp_store *s = tp__store_memory_new();
    if (s == NULL) snprintf(err, errlen, "out of memory");
    return s;
  }
  if (strncmp(where, "sqlite:", 7) == 0) {
    if (where[7] == '\0') {
      snprintf(err, errlen, "sqlite: needs a path (sqlite:/var/lib/tidepool/state.db)");
      return NULL;
    }
    return tp__store_sqlite_open(where, err, errlen);
  }
  struct stat st;
  if (stat(where, &st) != 0) {
    if (errno != ENOENT || mkdir(where, 0700) != 0) {
      snprintf(err, errlen, "%s: cannot make the state directory: %s", where,
               strerror(errno));
      return NULL;
    }
  }
  else if (!S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s: not a directory (give a directory for the state, or "
             "sqlite:PATH for a database file)", where);
    return NULL;
  }
  return tp__store_sqlite_open(where, err, errlen);
}
