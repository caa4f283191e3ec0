/*
** curl_dl.c: libcurl opened with dlopen on first use (curl_dl.h says why).
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curl_dl.h"

tp__curl_api tp__curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[512];  /* empty once loaded */

/* The table's entries and their symbols, in the struct's order. */
static const char *const names[] = {
  "curl_global_init", "curl_version_info", "curl_easy_strerror", "curl_easy_init",
  "curl_easy_cleanup", "curl_easy_setopt", "curl_easy_getinfo", "curl_easy_reset",
  "curl_easy_pause", "curl_slist_append", "curl_slist_free_all", "curl_url",
  "curl_url_set", "curl_url_get", "curl_url_cleanup", "curl_url_strerror", "curl_free",
  "curl_multi_init", "curl_multi_cleanup", "curl_multi_setopt", "curl_multi_add_handle",
  "curl_multi_remove_handle", "curl_multi_socket_action", "curl_multi_assign",
  "curl_multi_info_read", "curl_multi_poll", "curl_multi_perform",
};

static void load (void) {
  typedef void (*fn)(void);
  _Static_assert(sizeof(tp__curl_api) == sizeof names / sizeof names[0] * sizeof(fn),
                 "curl_dl.c: names[] must list every entry of tp__curl_api");
  const char *soname = getenv("TIDEPOOL_LIBCURL");
  if (soname == NULL || soname[0] == '\0') soname = TP_LIBCURL_SONAME;
  void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(load_error, sizeof load_error, "%s could not be loaded: %s (install libcurl: "
             "Debian's package libcurl4t64, or libcurl4)", soname, e ? e : "unknown reason");
    return;
  }
  tp__curl_api t;
  fn *slot = (fn *)&t;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *p = dlsym(h, names[i]);
    if (p == NULL) {
      snprintf(load_error, sizeof load_error, "%s could not be loaded: it has no %s "
               "(libcurl 7.80 or later is needed)", soname, names[i]);
      dlclose(h);
      return;
    }
    memcpy(&slot[i], &p, sizeof p);
  }
  tp__curl = t;  /* h stays open for the process's life */
}

int tp__curl_load (char *why, size_t wlen) {
  pthread_once(&once, load);
  if (load_error[0] == '\0') return 0;
  if (why && wlen) snprintf(why, wlen, "%s", load_error);
  return -1;
}
