/*
** curl_dl.h: libcurl, loaded on first use (dlopen) behind a table of function pointers.
**
** A run that makes no HTTP request never maps libcurl and the ~28 libraries it pulls in
** (TLS, HTTP/2, Kerberos, LDAP, SSH, ...): at start they were half of `tidepool run`'s
** time (docs/measurements.md, "the command's start"). Include this header instead of
** <curl/curl.h>; after it, curl_easy_init() and the rest call through tp__curl.
** tp__curl_load() must have returned 0 before the first such call.
*/
#ifndef TP_CURL_DL_H
#define TP_CURL_DL_H

#include <stddef.h>

#define CURL_DISABLE_TYPECHECK 1  /* curl_easy_setopt is the pointer below, not a macro */
#include <curl/curl.h>

/* The soname tp__curl_load opens; the environment variable TIDEPOOL_LIBCURL names
** another (the tests point it at a missing one). */
#define TP_LIBCURL_SONAME "libcurl.so.4"

typedef struct tp__curl_api {
  CURLcode (*global_init)(long);
  curl_version_info_data *(*version_info)(CURLversion);
  const char *(*easy_strerror)(CURLcode);
  CURL *(*easy_init)(void);
  void (*easy_cleanup)(CURL *);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  void (*easy_reset)(CURL *);
  CURLcode (*easy_pause)(CURL *, int);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  CURLU *(*url)(void);
  CURLUcode (*url_set)(CURLU *, CURLUPart, const char *, unsigned int);
  CURLUcode (*url_get)(const CURLU *, CURLUPart, char **, unsigned int);
  void (*url_cleanup)(CURLU *);
  const char *(*url_strerror)(CURLUcode);
  void (*free)(void *);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_cleanup)(CURLM *);
  CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
  CURLMcode (*multi_add_handle)(CURLM *, CURL *);
  CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
  CURLMcode (*multi_socket_action)(CURLM *, curl_socket_t, int, int *);
  CURLMcode (*multi_assign)(CURLM *, curl_socket_t, void *);
  CURLMsg *(*multi_info_read)(CURLM *, int *);
  CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
  CURLMcode (*multi_perform)(CURLM *, int *);
} tp__curl_api;

extern tp__curl_api tp__curl;

/* Opens libcurl once per process (thread-safe) and fills tp__curl. 0, or -1 with why set
** to "libcurl.so.4 could not be loaded: <the loader's reason>" (every later call gives
** the same answer). */
int tp__curl_load (char *why, size_t wlen);

#undef curl_easy_setopt   /* curl.h may define these three as macros of themselves */
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init         (tp__curl.global_init)
#define curl_version_info        (tp__curl.version_info)
#define curl_easy_strerror       (tp__curl.easy_strerror)
#define curl_easy_init           (tp__curl.easy_init)
#define curl_easy_cleanup        (tp__curl.easy_cleanup)
#define curl_easy_setopt         (tp__curl.easy_setopt)
#define curl_easy_getinfo        (tp__curl.easy_getinfo)
#define curl_easy_reset          (tp__curl.easy_reset)
#define curl_easy_pause          (tp__curl.easy_pause)
#define curl_slist_append        (tp__curl.slist_append)
#define curl_slist_free_all      (tp__curl.slist_free_all)
#define curl_url                 (tp__curl.url)
#define curl_url_set             (tp__curl.url_set)
#define curl_url_get             (tp__curl.url_get)
#define curl_url_cleanup         (tp__curl.url_cleanup)
#define curl_url_strerror        (tp__curl.url_strerror)
#define curl_free                (tp__curl.free)
#define curl_multi_init          (tp__curl.multi_init)
#define curl_multi_cleanup       (tp__curl.multi_cleanup)
#define curl_multi_setopt        (tp__curl.multi_setopt)
#define curl_multi_add_handle    (tp__curl.multi_add_handle)
#define curl_multi_remove_handle (tp__curl.multi_remove_handle)
#define curl_multi_socket_action (tp__curl.multi_socket_action)
#define curl_multi_assign        (tp__curl.multi_assign)
#define curl_multi_info_read     (tp__curl.multi_info_read)
#define curl_multi_poll          (tp__curl.multi_poll)
#define curl_multi_perform       (tp__curl.multi_perform)

#endif
