/*
** test_upstream.c: upstream MCP servers (lua/upstream.lua) through the C API: their tools
** in the registry with their origin and raw-name aliases, kept across a plugin reload,
** and nothing of them left at tp_engine_destroy (no handle, no process). Runs
** spec/upstream/edge-server.mjs with node, from the repository's root.
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tp_test.h"
#include "tidepool_server.h"

/* A config with one server, edge, recording into dir (made here). */
static tp_engine *engine_with_edge (char *dir, size_t dlen, const char *flags) {
  snprintf(dir, dlen, "/tmp/tp-upstream-c-XXXXXX");
  if (mkdtemp(dir) == NULL) return NULL;
  char cfg[1024];
  snprintf(cfg, sizeof cfg, "{\"mcpServers\": {\"edge\": {\"command\": \"node\", \"args\": "
           "[\"spec/upstream/edge-server.mjs\"%s], \"env\": {\"EDGE_DIR\": \"%s\"}}}}",
           flags, dir);
  tp_engine *e = tp_engine_create();
  if (e && tp_engine_configure(e, cfg, strlen(cfg)) != TP_OK) {
    tp_engine_destroy(e);
    return NULL;
  }
  return e;
}

static long pid_of (const char *dir) {
  char path[300];
  snprintf(path, sizeof path, "%s/pid", dir);
  FILE *f = fopen(path, "r");
  long pid = -1;
  if (f) { if (fscanf(f, "%ld", &pid) != 1) pid = -1; fclose(f); }
  return pid;
}

static void cleanup (const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static const tp_tool_info *find_info (tp_engine *e, const char *name, tp_tool_info *info) {
  for (size_t i = 0; i < tp_engine_tool_count(e); i++)
    if (tp_engine_tool_info(e, i, info) == TP_OK && strcmp(info->name, name) == 0) return info;
  return NULL;
}

TEST(upstream_tools_run_by_name_and_raw_name_and_nothing_is_left_at_destroy) {
  char dir[64];
  tp_engine *e = engine_with_edge(dir, sizeof dir, ", \"--names\"");
  CHECK(e != NULL);
  if (e == NULL) return;
  const char *src = "return {tools.edge.get_item{}, tools.edge[\"get-item\"]{}, "
                    "tools.edge.echo{text = \"c\"}}";
  char *env = NULL;
  int ok = 0;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_HAS(env, "\"result\":[\"get-item\",\"get-item\",\"c\"]");
  CHECK(ok);
  tp_free(env);
  tp_tool_info info;
  CHECK(find_info(e, "edge.get_item", &info) != NULL);
  if (find_info(e, "edge.get_item", &info)) CHECK_STR(info.origin, "mcp server edge");
  CHECK(find_info(e, "edge.get-item", &info) == NULL);  /* an alias is not listed */
  long pid = pid_of(dir);
  CHECK(pid > 0 && kill((pid_t)pid, 0) == 0);
  tp_engine_destroy(e);  /* RUN checks that no handle was left open */
  CHECK(pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH);
  cleanup(dir);
}

/* A tool with no outputSchema reads "-> text" and what text becomes; once it answered,
** tools.describe shows the shape of its last result; a tool with one does not. */
TEST(a_tool_without_output_schema_says_text_then_shows_what_came_back) {
  char dir[64];
  tp_engine *e = engine_with_edge(dir, sizeof dir, "");
  CHECK(e != NULL);
  if (e == NULL) return;
  const char *src = "return tools.describe('edge.json_text')";
  char *env = NULL;
  int ok = 0;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_HAS(env, "edge.json_text{} -> text -- Returns JSON as text.\\n\\n-- -> text: the tool's "
                 "text, unwrapped: JSON text becomes a table, other text a string\\n\"");
  CHECK(env != NULL && strstr(env, "its last result") == NULL);
  tp_free(env);
  const char *call = "tools.edge.json_text{} tools.edge.echo{text = 'hi'} tools.edge.structured{} "
                     "return {tools.describe('edge.json_text'), tools.describe('edge.echo'), "
                     "tools.describe('edge.structured')}";
  env = NULL;
  CHECK_INT(tp_engine_run(e, call, strlen(call), NULL, &env, &ok), TP_OK);
  CHECK(ok);
  CHECK_HAS(env, "-- its last result here was {a: integer, b: integer[], c: json.null}\\n\"");
  CHECK_HAS(env, "-- its last result here was string\\n\"");
  CHECK_HAS(env, "\"edge.structured{} -> {n: integer} -- Returns structured content.\\n\"");
  tp_free(env);
  tp_engine_destroy(e);
  cleanup(dir);
}

TEST(a_plugin_reload_keeps_the_upstream_tools_and_a_plugin_cannot_take_their_names) {
  char dir[64];
  tp_engine *e = engine_with_edge(dir, sizeof dir, "");
  CHECK(e != NULL);
  if (e == NULL) return;
  CHECK_INT(tp_engine_load_tools(e, "spec/upstream/plugins"), 0);
  CHECK_HAS(tp_engine_error(e), "tool edge.echo is defined already (at mcp server edge)");
  size_t n = tp_engine_tool_count(e);
  CHECK(n > 5);
  CHECK_INT(tp_engine_unload_tools(e), 0);
  CHECK_INT((int)tp_engine_tool_count(e), (int)n);
  char *text = tp_engine_describe(e, "compact");
  CHECK(text != NULL);
  if (text) CHECK_HAS(text, "edge.slow{ms, ...}");
  tp_free(text);
  tp_engine_destroy(e);
  cleanup(dir);
}

TEST(a_call_cut_by_its_time_limit_is_cancelled_upstream_and_leaves_nothing) {
  char dir[64];
  tp_engine *e = engine_with_edge(dir, sizeof dir, "");
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_limits lim;
  tp_limits_init(&lim);
  lim.tool_timeout_us = 300000;
  const char *src = "return tools.edge.slow{ms = 5000}";
  char *env = NULL;
  int ok = 1;
  CHECK_INT(tp_engine_run(e, src, strlen(src), &lim, &env, &ok), TP_OK);
  CHECK(!ok);
  CHECK_HAS(env, "\"code\":\"tool.timeout\"");
  tp_free(env);
  tp_engine_destroy(e);
  char path[300], line[64] = "";
  snprintf(path, sizeof path, "%s/cancelled", dir);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (f) { CHECK(fgets(line, sizeof line, f) != NULL); fclose(f); }
  CHECK_STR(line, "4\n");  /* ids: server/discover 1, initialize 2, tools/list 3 */
  cleanup(dir);
}

/* A config with one server that never answers its handshake (hostile-server.mjs). */
static tp_engine *engine_with_silent (void) {
  const char *cfg = "{\"mcpServers\": {\"h\": {\"command\": \"node\", \"args\": "
                    "[\"spec/upstream/hostile-server.mjs\", \"--silent\"]}}}";
  tp_engine *e = tp_engine_create();
  if (e && tp_engine_configure(e, cfg, strlen(cfg)) != TP_OK) {
    tp_engine_destroy(e);
    return NULL;
  }
  return e;
}

/* The number after "key": in env, or -1. */
static double number_after (const char *env, const char *key) {
  const char *p = strstr(env, key);
  return p ? strtod(p + strlen(key), NULL) : -1;
}

TEST(tp_engine_run_waits_for_a_silent_server_within_its_time_limit_and_counts_it) {
  tp_engine *e = engine_with_silent();
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = 700000;
  const char *src = "return tools.h.ok{}";
  char *env = NULL;
  int ok = 1;
  CHECK_INT(tp_engine_run(e, src, strlen(src), &lim, &env, &ok), TP_OK);
  CHECK(!ok);
  if (env) {
    CHECK_HAS(env, "\"code\":\"limit.time\"");
    double wait = number_after(env, "\"wait_ms\":"), wall = number_after(env, "\"wall_ms\":");
    CHECK(wait >= 690 && wait < 5000);  /* the start's wait, not the handshake's 60 s */
    CHECK(wall >= wait);
  }
  tp_free(env);
  /* a later run waits for nothing: the server goes on starting in the background */
  src = "return tools ~= nil";
  CHECK_INT(tp_engine_run(e, src, strlen(src), &lim, &env, &ok), TP_OK);
  CHECK(ok);
  if (env) CHECK(strstr(env, "wait_ms") == NULL);
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(tp_engine_set_start_timeout_bounds_tp_engine_start_servers_and_the_next_run_counts_it) {
  tp_engine *e = engine_with_silent();
  CHECK(e != NULL);
  if (e == NULL) return;
  CHECK_INT(tp_engine_set_start_timeout(e, 300000), TP_OK);
  CHECK_INT(tp_engine_start_servers(e, NULL, NULL), TP_OK);
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = 30000000;  /* generous: a loaded machine (load 10) failed at 5 s; were the
                          ** 300 ms bound not kept, the wait would run to this limit */
  const char *src = "return 1";
  char *env = NULL;
  int ok = 0;
  CHECK_INT(tp_engine_run(e, src, strlen(src), &lim, &env, &ok), TP_OK);
  CHECK(ok);
  if (env) {
    double wait = number_after(env, "\"wait_ms\":");
    CHECK(wait >= 290 && wait < 15000);
  }
  tp_free(env);
  tp_engine_destroy(e);
}

/* The one list of protocol versions: latest first, the 2026 era's alone at the top, and
** what tidepool offers upstream is the first handshake version it accepts. */
TEST(tp_mcp_version_lists_the_versions_latest_first_with_their_flags) {
  unsigned f = 0;
  CHECK_STR(tp_mcp_version(0, &f), TP_MCP_MODERN_VERSION);
  CHECK_INT((int)f, (int)(TP_MCP_V_MODERN | TP_MCP_V_ELICIT_MODE | TP_MCP_V_CLIENT));
  CHECK_STR(tp_mcp_version(1, &f), "2025-11-25");
  CHECK_INT((int)f, (int)(TP_MCP_V_ELICIT_MODE | TP_MCP_V_CLIENT));
  CHECK_STR(tp_mcp_version(3, &f), "2025-03-26");
  CHECK_INT((int)f, (int)(TP_MCP_V_BATCHES | TP_MCP_V_CLIENT));
  CHECK_STR(tp_mcp_version(4, &f), "2024-11-05");
  CHECK_INT((int)f, (int)TP_MCP_V_BATCHES);
  CHECK(tp_mcp_version(5, &f) == NULL);
  CHECK(tp_mcp_version((size_t)-1, NULL) == NULL);
  const char *prev = NULL, *v;
  for (size_t i = 0; (v = tp_mcp_version(i, &f)) != NULL; i++) {
    CHECK(prev == NULL || strcmp(prev, v) > 0);      /* latest first, no repeat */
    CHECK(i == 0 || (f & TP_MCP_V_MODERN) == 0);      /* one 2026-era version */
    prev = v;
  }
}

/* The list is written once: no version literal in lua/upstream.lua or engine/front (they
** read tp_mcp_version, upstream.lua through E.mcp_versions). */
TEST(no_protocol_version_is_written_outside_the_one_list) {
  static const char *const files[] = {
    "lua/upstream.lua", "engine/front/mcp/era.c", "engine/front/mcp/server.c",
    "engine/front/mcp/http.c", "engine/front/mcp/era.h",
  };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    FILE *fp = fopen(files[i], "r");
    if (fp == NULL) {
      TP_FAIL_AT("cannot open %s (run from the repository's root)", files[i]);
      continue;
    }
    char line[4096];
    int no = 0;
    while (fgets(line, sizeof line, fp)) {
      no++;
      for (const char *q = strchr(line, '"'); q; q = strchr(q + 1, '"')) {
        int y, m, d, n = 0;
        if (sscanf(q + 1, "%4d-%2d-%2d\"%n", &y, &m, &d, &n) == 3 && n == 11)
          TP_FAIL_AT("%s:%d writes the version %.10s: read it from tp_mcp_version",
                     files[i], no, q + 1);
      }
    }
    fclose(fp);
  }
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(tp_mcp_version_lists_the_versions_latest_first_with_their_flags);
  RUN(no_protocol_version_is_written_outside_the_one_list);
  RUN(upstream_tools_run_by_name_and_raw_name_and_nothing_is_left_at_destroy);
  RUN(a_tool_without_output_schema_says_text_then_shows_what_came_back);
  RUN(a_plugin_reload_keeps_the_upstream_tools_and_a_plugin_cannot_take_their_names);
  RUN(a_call_cut_by_its_time_limit_is_cancelled_upstream_and_leaves_nothing);
  RUN(tp_engine_run_waits_for_a_silent_server_within_its_time_limit_and_counts_it);
  RUN(tp_engine_set_start_timeout_bounds_tp_engine_start_servers_and_the_next_run_counts_it);
  return tp_test_end();
}
