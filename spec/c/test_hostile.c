/*
** test_hostile.c: host memory and time follow the run's limits, measured from outside
** the process the way an operator would. Each case is an attack: a script that makes
** the host build or convert much more than the script's own memory (a table reached
** through many references, text that decodes to many nodes, many return values). Each
** runs as `tidepool run --json --memory 16M --timeout T FILE` in a child process; the
** test asserts
**   (a) the exact error code of the envelope (parsed with jansson), or ok;
**   (b) the child's peak RSS (wait4's ru_maxrss) <= 4 x memory + 64 MiB;
**   (c) its wall time <= T x 1.5 + 1 s of slack for a loaded machine.
** Under AddressSanitizer (make sanitize) the RSS bound is not asserted (the shadow
** memory and quarantine are not the engine's), and the time limits of the cases that do
** not test one are 5 times longer, the slack larger.
**
** With --bench it runs the cases once and prints "host_rss_ratio: X x": the peak RSS of
** the worst case divided by --memory (make bench; target <= 4).
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "tp_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define MIB (1024.0 * 1024.0)

static char cli[PATH_MAX];       /* the tidepool next to this test's build directory */
static char tmpdir[] = "/tmp/tp-hostile-XXXXXX";
static double worst_ratio;       /* peak RSS / memory over the cases run */
static const char *worst_case = "";

/* A DAG of n levels where each level refers to the one below twice: 2^n paths, a few
** hundred bytes of Lua heap. */
#define DAG(n) "local dag = {} for _ = 1, " #n " do dag = { dag, dag } end "

typedef struct outcome {
  char code[64];       /* "ok", an error code, or what went wrong */
  char message[256];
  int line;            /* error.line, 0 when absent */
  double wall_s, rss_mib;
} outcome;

/* Runs the script with the options in a child and fills o. */
static void run_cli (const char *script, const char *memory, const char *timeout,
                     const char *extra, outcome *o) {
  char path[PATH_MAX];
  memset(o, 0, sizeof *o);
  snprintf(path, sizeof path, "%s/script.lua", tmpdir);
  FILE *f = fopen(path, "w");
  if (f == NULL) { snprintf(o->code, sizeof o->code, "(cannot write %.40s)", path); return; }
  fputs(script, f);
  fclose(f);
  const char *argv[16];
  int n = 0;
  argv[n++] = cli; argv[n++] = "run"; argv[n++] = "--json";
  argv[n++] = "--memory"; argv[n++] = memory;
  argv[n++] = "--timeout"; argv[n++] = timeout;
  char extra_buf[PATH_MAX + 64];
  if (extra != NULL) {  /* "--opt value" pairs separated by spaces */
    snprintf(extra_buf, sizeof extra_buf, "%s", extra);
    for (char *tok = strtok(extra_buf, " "); tok && n < 14; tok = strtok(NULL, " ")) argv[n++] = tok;
  }
  argv[n++] = path;
  argv[n] = NULL;
  int out[2];
  if (pipe(out) != 0) { snprintf(o->code, sizeof o->code, "(pipe failed)"); return; }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    execv(cli, (char *const *)argv);
    _exit(127);
  }
  close(out[1]);
  size_t len = 0, cap = 1 << 16;
  char *buf = malloc(cap);
  for (;;) {
    if (len + 4096 > cap) { cap *= 2; buf = realloc(buf, cap); }
    ssize_t r = read(out[0], buf + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(out[0]);
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
  clock_gettime(CLOCK_MONOTONIC, &t1);
  o->wall_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  o->rss_mib = (double)ru.ru_maxrss * 1024.0 / MIB;  /* ru_maxrss is in KiB */
  buf[len] = '\0';
  json_error_t je;
  json_t *env = json_loadb(buf, len, 0, &je);
  if (WIFSIGNALED(status))
    snprintf(o->code, sizeof o->code, "(killed by signal %d)", WTERMSIG(status));
  else if (env == NULL)
    snprintf(o->code, sizeof o->code, "(no JSON envelope: %.40s)", buf);
  else if (json_is_true(json_object_get(env, "ok")))
    snprintf(o->code, sizeof o->code, "ok");
  else {
    json_t *err = json_object_get(env, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    snprintf(o->code, sizeof o->code, "%s", code ? code : "(no error code)");
    snprintf(o->message, sizeof o->message, "%s", msg ? msg : "");
    o->line = (int)json_integer_value(json_object_get(err, "line"));
  }
  json_decref(env);
  free(buf);
}

/* Parses "16M" or "256M" to bytes (only the forms used here). */
static double mib_of (const char *size) { return strtod(size, NULL); }
static double seconds_of (const char *d) {
  double v = strtod(d, NULL);
  return strstr(d, "ms") ? v / 1000 : v;
}

/* Runs one attack and checks its code, its peak RSS and its wall time; returns the
** error's line (0: none), for cases that must end at a given point. */
static int attack (const char *name, const char *script, const char *memory,
                   const char *timeout, const char *extra, const char *want) {
  outcome o;
  char slow[32];
  /* Where the verdict is not the time limit, the limit is only a net against a hang: a
  ** loaded machine (load 8 on 2 cores, a CI machine) takes several times an idle one's
  ** time to reach the verdict the case is about, and ASan about 5 x more. */
  if (strcmp(want, "limit.time") != 0) {
    snprintf(slow, sizeof slow, "%gs", seconds_of(timeout) * (UNDER_ASAN ? 50 : 10));
    timeout = slow;
  }
  run_cli(script, memory, timeout, extra, &o);
  double mem = mib_of(memory), limit = seconds_of(timeout);
  double rss_max = 4 * mem + 64, wall_max = limit * 1.5 + (UNDER_ASAN ? 5.0 : 1.0);
  double ratio = o.rss_mib / mem;
  if (ratio > worst_ratio) { worst_ratio = ratio; worst_case = name; }
  printf("#   %s: %s, %.1f MiB peak RSS (%.2f x memory), %.2f s\n", name, o.code, o.rss_mib,
         ratio, o.wall_s);
  if (strcmp(o.code, want) != 0)
    TP_FAIL_AT("%s: code %s, expected %s (%s)", name, o.code, want, o.message);
  if (!UNDER_ASAN && o.rss_mib > rss_max)
    TP_FAIL_AT("%s: peak RSS %.1f MiB, over 4 x %.0f MiB + 64 MiB = %.0f MiB", name,
               o.rss_mib, mem, rss_max);
  if (o.wall_s > wall_max)
    TP_FAIL_AT("%s: took %.2f s, over %.1f s x 1.5 + slack = %.2f s", name, o.wall_s,
               limit, wall_max);
  return o.line;
}

/* ---- the result ------------------------------------------------------------------------ */

TEST(returning_a_dag_that_doubles_per_level) {
  attack("return_dag", DAG(40) "return dag", "16M", "2s", NULL, "limit.memory");
}

TEST(returning_a_dag_with_eight_references_per_level) {
  attack("return_dag_wide",
         "local t = {} for _ = 1, 30 do local n = {} for j = 1, 8 do n[j] = t end t = n end "
         "return t", "16M", "2s", NULL, "limit.memory");
}

TEST(returning_one_empty_table_referenced_many_times) {
  /* 200,000 "{}" are 600 KB of JSON but 48 MB of jansson objects */
  attack("return_shared_empty_table",
         "local e, t = {}, {} for i = 1, 200000 do t[i] = e end return t",
         "16M", "2s", NULL, "limit.memory");
}

TEST(returning_one_long_string_referenced_many_times) {
  const char *s = "local s, t = ('x'):rep(1000000), {} for i = 1, 200 do t[i] = s end return t";
  attack("return_shared_long_string", s, "16M", "2s", NULL, "limit.result");
  attack("return_shared_long_string_no_result_cap", s, "16M", "2s", "--max-result 0",
         "limit.memory");
}

TEST(returning_many_values_each_near_the_result_cap) {
  attack("return_many_values_near_cap",
         "local s = ('x'):rep(4000000) return s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s",
         "16M", "2s", NULL, "limit.result");
  attack("return_many_dag_values",
         DAG(30) "local t = {} for i = 1, 200 do t[i] = dag end return table.unpack(t)",
         "16M", "2s", "--max-result 0", "limit.memory");
}

TEST(returning_many_small_numbers) {
  attack("return_many_integers", "local t = {} for i = 1, 400000 do t[i] = i end return t",
         "16M", "2s", NULL, "limit.memory");
}

TEST(returning_many_tostring_results) {
  attack("return_tostring_heavy",
         "local t = {} for i = 1, 150000 do t[i] = tostring(i + 0.5) end return t",
         "16M", "2s", NULL, "limit.memory");
}

TEST(returning_an_object_with_many_keys) {
  attack("return_many_keys",
         "local t = {} for i = 1, 150000 do t[i .. ''] = true end return t",
         "16M", "2s", NULL, "limit.memory");
}

TEST(a_deadline_passing_while_the_result_is_converted) {
  /* within a 1 GiB budget the conversion takes seconds: the deadline stops it. No line:
  ** the verdict came after the script had returned */
  int line = attack("result_conversion_past_deadline",
                    "local t = {} for _ = 1, 22 do t = { t, t, 1 } end return t",
                    "1024M", "0.5s", "--max-result 0", "limit.time");
  CHECK_INT(line, 0);
}

/* ---- errors ------------------------------------------------------------------------------ */

TEST(raising_a_huge_error_message) {
  attack("error_huge_message", "error(('x'):rep(8000000))", "16M", "2s", NULL, "runtime");
}

TEST(raising_an_error_object_with_huge_fields) {
  attack("error_huge_object",
         "error({ message = ('x'):rep(6000000), code = ('y'):rep(1000000), "
         "extra = (function() local t = {} for i = 1, 100000 do t[i] = {} end return t end)() })",
         "16M", "2s", NULL, "runtime");
}

/* ---- tool arguments ------------------------------------------------------------------ */

TEST(passing_a_dag_to_a_tool_that_does_not_exist) {
  /* the name is built at run time: written out, the pre-run check refuses it first */
  attack("tool_args_dag_unknown_tool", DAG(40) "local n = 'such' return tools.no[n]{ x = dag }",
         "16M", "2s", NULL, "limit.memory");
}

TEST(passing_a_dag_to_kv_set) {
  attack("tool_args_dag_kv_set", DAG(40) "return tools.kv.set{ key = 'k', value = dag }",
         "16M", "2s", NULL, "limit.memory");
}

TEST(passing_a_dag_to_time_now_under_pcall) {
  /* pcall cannot swallow it */
  attack("tool_args_dag_time_now",
         DAG(40) "local ok = pcall(tools.time.now, { x = dag }) return 'survived'",
         "16M", "2s", NULL, "limit.memory");
}

TEST(many_calls_with_large_arguments_are_refunded) {
  /* each call's arguments cost ~1 MB of host memory while held: 300 of them would be
  ** 300 MB if what was freed stayed charged */
  attack("tool_args_refunded",
         "local big = {} for i = 1, 20000 do big[i] = i end "
         "for _ = 1, 300 do pcall(tools.no.such, { x = big }) end return 'done'",
         "16M", "60s", NULL, "ok");  /* ~1.2 s of CPU; the wall limit is only a backstop,
                                     ** generous for a loaded machine (5 s failed at load 10) */
}

/* ---- tool results ------------------------------------------------------------------- */

static char plugin_opt[PATH_MAX + 16];  /* "--tools DIR" with the plugin below */

/* A plugin whose handler returns what the script asks for: n integers, or a DAG of n
** levels built in the host state. */
static const char plugin[] =
  "return {\n"
  "  name = 'big.make', description = 'Returns a large value.',\n"
  "  input = { type = 'object', properties = { n = { type = 'integer' }, dag = { type = 'boolean' } } },\n"
  "  handler = function(args)\n"
  "    if args.dag then local t = {} for _ = 1, args.n do t = { t, t } end return { v = t } end\n"
  "    local t = {} for i = 1, args.n do t[i] = i end return { v = t }\n"
  "  end,\n"
  "}\n";

TEST(a_tool_result_larger_than_the_budget) {
  attack("tool_result_many_integers", "return #tools.big.make{ n = 600000 }.v",
         "16M", "2s", plugin_opt, "limit.memory");
}

TEST(a_tool_result_that_is_a_dag) {
  attack("tool_result_dag", "return tools.big.make{ n = 40, dag = true }",
         "16M", "2s", plugin_opt, "limit.memory");
}

/* ---- json.encode / json.decode -------------------------------------------------------- */

TEST(json_encode_of_a_dag) {
  attack("json_encode_dag", DAG(40) "local ok = pcall(json.encode, dag) return 'survived'",
         "16M", "2s", NULL, "limit.memory");
}

TEST(json_encode_past_the_deadline) {
  int line = attack("json_encode_past_deadline",
                    "local t = {} for _ = 1, 22 do t = { t, t, 1 } end\n"
                    "return #json.encode(t)", "1024M", "0.5s", NULL, "limit.time");
  CHECK_INT(line, 2);  /* stopped inside json.encode */
}

TEST(json_decode_of_nested_brackets_at_the_cap) {
  /* 1 MiB is the decode cap at 16M; jansson refuses nesting past 2048 */
  attack("json_decode_nested_at_cap",
         "local n = 524288 return json.decode(('['):rep(n) .. (']'):rep(n))",
         "16M", "2s", NULL, "runtime");
}

TEST(json_decode_of_zeros_at_the_cap) {
  attack("json_decode_zeros_at_cap",
         "local n = 524287 return #json.decode('[' .. ('0,'):rep(n - 1) .. '0]')",
         "16M", "2s", NULL, "limit.memory");
}

TEST(json_decode_of_short_strings_at_the_cap) {
  attack("json_decode_strings_at_cap",
         "local n = 349525 return #json.decode('[' .. ('\"\",'):rep(n - 1) .. '\"\"]')",
         "16M", "2s", NULL, "limit.memory");
}

TEST(json_round_trips_in_a_loop_are_refunded) {
  /* each round trip holds ~0.5 MB of host memory: 200 would be 100 MB if not refunded */
  attack("json_loop_refunded",
         "local big = {} for i = 1, 10000 do big[i] = i end "
         "for _ = 1, 200 do local s = json.encode(big) assert(#json.decode(s) == 10000) end "
         "return 'done'", "16M", "5s", NULL, "ok");
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  int bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
  char self[PATH_MAX - 16];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) { printf("not ok - cannot find this test's path\n# 0 passed, 1 failed\n"); return 1; }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) *slash = '\0';  /* BUILD/tests */
  snprintf(cli, sizeof cli, "%s/../tidepool", self);
  if (access(cli, X_OK) != 0 || mkdtemp(tmpdir) == NULL) {
    printf("not ok - %s is not built, or no temporary directory\n# 0 passed, 1 failed\n", cli);
    return 1;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/plugins", tmpdir);
  snprintf(plugin_opt, sizeof plugin_opt, "--tools %s", dir);
  char plugin_path[PATH_MAX + 16];
  snprintf(plugin_path, sizeof plugin_path, "%s/big.lua", dir);
  FILE *pf = mkdir(dir, 0700) == 0 ? fopen(plugin_path, "w") : NULL;
  if (pf == NULL) { printf("not ok - cannot write %s\n# 0 passed, 1 failed\n", plugin_path); return 1; }
  fputs(plugin, pf);
  fclose(pf);
  RUN(returning_a_dag_that_doubles_per_level);
  RUN(returning_a_dag_with_eight_references_per_level);
  RUN(returning_one_empty_table_referenced_many_times);
  RUN(returning_one_long_string_referenced_many_times);
  RUN(returning_many_values_each_near_the_result_cap);
  RUN(returning_many_small_numbers);
  RUN(returning_many_tostring_results);
  RUN(returning_an_object_with_many_keys);
  RUN(a_deadline_passing_while_the_result_is_converted);
  RUN(raising_a_huge_error_message);
  RUN(raising_an_error_object_with_huge_fields);
  RUN(passing_a_dag_to_a_tool_that_does_not_exist);
  RUN(passing_a_dag_to_kv_set);
  RUN(passing_a_dag_to_time_now_under_pcall);
  RUN(many_calls_with_large_arguments_are_refunded);
  RUN(a_tool_result_larger_than_the_budget);
  RUN(a_tool_result_that_is_a_dag);
  RUN(json_encode_of_a_dag);
  RUN(json_encode_past_the_deadline);
  RUN(json_decode_of_nested_brackets_at_the_cap);
  RUN(json_decode_of_zeros_at_the_cap);
  RUN(json_decode_of_short_strings_at_the_cap);
  RUN(json_round_trips_in_a_loop_are_refunded);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/script.lua", tmpdir);
  unlink(path);
  unlink(plugin_path);
  rmdir(dir);
  rmdir(tmpdir);
  if (bench) printf("host_rss_ratio: %.2f x (worst: %s)\n", worst_ratio, worst_case);
  return tp_test_end();
}
