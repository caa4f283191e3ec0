/*
** options.c: what the command line's front ends share (cli.c and mcp/): the limit
** options and their --help lines, reading a config file and reporting its problems, the
** built-in tools' folder, usage errors. Not installed, not API.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tidepool.h"
#include "options.h"

#define INPUT_MAX (64u << 20)  /* refuse to read more source than this */

/* The option of `tidepool run` (mcp 0) or `tidepool mcp` (mcp 1) for limit li, or NULL. */
static const char *limit_flag (const tp_limit_info *li, int mcp) {
  return mcp ? li->mcp : li->flag;
}

void tp__options_limits_help (FILE *f, int mcp, const tp_limits *defaults) {
  static const char *const args[] = { "SIZE", "N", "DURATION" };
  for (size_t i = 0, n = tp_limit_count(); i < n; i++) {
    const tp_limit_info *li = tp_limit_at(i);
    const char *flag = limit_flag(li, mcp);
    if (flag == NULL) continue;
    char opt[64], def[32];
    snprintf(opt, sizeof opt, "%s %s", flag, args[li->unit]);
    tp_format_value(li->unit, defaults ? tp_limits_get(defaults, li) : li->def, def,
                    sizeof def);
    if (strlen(opt) <= 20) fprintf(f, "  %-20s %s (default %s)\n", opt, li->help, def);
    else fprintf(f, "  %s\n  %-20s %s (default %s)\n", opt, "", li->help, def);
  }
}

const char *tp__options_option_name (const char *arg, char *name, size_t len) {
  const char *eq = strchr(arg, '=');
  size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
  if (n >= len) return NULL;
  memcpy(name, arg, n);
  name[n] = '\0';
  return arg + n;
}

int tp__options_usage_error (const char *msg, const char *arg) {
  const char *at = strstr(msg, "%s");
  fprintf(stderr, "tidepool: ");
  if (at) fprintf(stderr, "%.*s%s%s", (int)(at - msg), msg, arg, at + 2);
  else fputs(msg, stderr);
  fprintf(stderr, "\nTry 'tidepool --help'.\n");
  return TP_EXIT_USAGE;
}

int tp__options_limit_option (const char *name, const char *val, tp_limits *lim, int mcp,
                          char *why, size_t whylen) {
  for (size_t i = 0, n = tp_limit_count(); i < n; i++) {
    const tp_limit_info *li = tp_limit_at(i);
    const char *flag = limit_flag(li, mcp);
    if (flag == NULL || strcmp(flag, name) != 0) continue;
    char bad[200];
    if (tp_limits_set(lim, li->field, val, bad, sizeof bad) == TP_OK) return 1;
    snprintf(why, whylen, "%s: %s", flag, bad);  /* "--memory: bad size '12Q' (...)" */
    return -1;
  }
  return 0;
}

char *tp__options_read_all (FILE *f, size_t *len) {
  size_t cap = 1 << 14, n = 0;
  char *buf = malloc(cap);
  if (buf == NULL) return NULL;
  for (;;) {
    if (n == cap) {
      if (cap >= INPUT_MAX) { free(buf); errno = EFBIG; return NULL; }
      char *nb = realloc(buf, cap * 2);
      if (nb == NULL) { free(buf); return NULL; }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) { free(buf); return NULL; }
  *len = n;
  return buf;
}

/* The text of the config file path, or NULL with a message on stderr. */
char *tp__options_read_config (const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "tidepool: %s: cannot read: %s\n", path, strerror(errno));
    return NULL;
  }
  char *text = tp__options_read_all(f, len);
  int err = errno;
  fclose(f);
  if (text == NULL) fprintf(stderr, "tidepool: %s: cannot read: %s\n", path, strerror(err));
  return text;
}

void tp__options_config_problems (FILE *f, const char *prefix, const char *path,
                              const char *problems) {
  while (*problems) {
    int n = (int)strcspn(problems, "\n");
    const char *line = problems;
    if (strncmp(line, "config: ", 8) == 0) { line += 8; n -= 8; }
    fprintf(f, "%s%s: %.*s\n", prefix, path, n, line);
    problems = line + n + (line[n] == '\n');
  }
}

char *tp__options_config_dir (const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (dir == NULL || dir[0] == '/') return dir;
  char *cwd = getcwd(NULL, 0), *abs = NULL;
  if (cwd == NULL) return dir;
  int n = strcmp(dir, ".") == 0 ? asprintf(&abs, "%s", cwd) : asprintf(&abs, "%s/%s", cwd, dir);
  free(cwd);
  free(dir);
  return n < 0 ? NULL : abs;
}

char *tp__options_journal_path (const char *state) {
  char *p = NULL;
  if (state == NULL || strncmp(state, "redis://", 8) == 0 || strncmp(state, "rediss://", 9) == 0
      || strncmp(state, "memory:", 7) == 0)
    return NULL;
  if (strncmp(state, "sqlite:", 7) == 0) {
    if (state[7] == '\0') return NULL;
    return asprintf(&p, "%s.journal.jsonl", state + 7) < 0 ? NULL : p;
  }
  return asprintf(&p, "%s/journal.jsonl", state) < 0 ? NULL : p;
}

/* The built-in tools: $TIDEPOOL_TOOLS_DIR, else the source tree's tools/ when the binary
** runs from a build directory (<exe>/../tools or <exe>/../../tools holding time.lua),
** else the installed TP_DATADIR/tools. */
const char *tp__options_builtin_tools_dir (char *buf, size_t len) {
  const char *env = getenv("TIDEPOOL_TOOLS_DIR");
  if (env && *env) return env;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
  if (slash) {
    *slash = '\0';
    static const char *const ups[] = { "/../tools", "/../../tools" };
    for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++) {
      struct stat st;
      snprintf(buf, len, "%s%s/time.lua", exe, ups[i]);
      if (stat(buf, &st) == 0) {
        snprintf(buf, len, "%s%s", exe, ups[i]);
        return buf;
      }
    }
  }
  return TP_DATADIR "/tools";
}

int tp__options_limits_json (const tp_limits *base, json_t *lm, tp_limits *out, char *why,
                             size_t len) {
  if (!json_is_object(lm)) {
    snprintf(why, len, "must be an object of limits by name, e.g. {\"timeout\": \"2s\", "
             "\"memory\": \"16M\"}");
    return 0;
  }
  tp_limits l = *base;
  const char *key;
  json_t *v;
  json_object_foreach(lm, key, v) {
    const tp_limit_info *li = tp_limit_find(key);
    char err[256];
    int rc = li == NULL ? TP_EINVAL
           : json_is_string(v) ? tp_limits_set(&l, key, json_string_value(v), err, sizeof err)
           : json_is_number(v) ? tp_limits_set_number(&l, key, json_number_value(v), err,
                                                      sizeof err)
           : TP_EINVAL;
    if (li == NULL) snprintf(err, sizeof err, "unknown limit '%.64s'", key);
    else if (rc != TP_OK && !json_is_string(v) && !json_is_number(v))
      snprintf(err, sizeof err, "%s must be a number or a string", key);
    if (rc != TP_OK) { snprintf(why, len, "%s", err); return 0; }
    uint64_t have = tp_limits_get(base, li), want = tp_limits_get(&l, li);
    if (want == 0 ? have != 0 : have != 0 && want > have) {
      char b[48], w[48];
      tp_format_value(li->unit, have, b, sizeof b);
      tp_format_value(li->unit, want, w, sizeof w);
      snprintf(why, len, "%s: %s is above the server's %s: a run may lower the server's "
               "limits, never raise them", key, w, b);
      return 0;
    }
  }
  *out = l;
  return 1;
}
