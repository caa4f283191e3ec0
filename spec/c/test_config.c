/*
** test_config.c: the config file through tidepool.h (tp_engine_configure*, tp_config_check,
** tp_engine_config_*): the committed schema is the one built into the library and covers
** the limits table exactly; a good file's limits, tools and workspace come back with its
** relative paths made absolute against its folder, and its sections reach plugins; every
** problem of a bad file is a line with its JSON pointer, exactly; and malformed, huge and
** deeply nested inputs end in a clear error, never a crash.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tidepool.h"
#include "embedded.h"
#include "engine.h"
#include "tp_test.h"

static char tmp[256];
static char buf[1 << 16];

static void write_file (const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) { perror(path); exit(1); }
  fputs(text, f);
  fclose(f);
}

/* TMP/conf/{plugins,data}/ and TMP/conf/plugins/cfg.lua: a plugin whose tool returns the
** config sections it was loaded with. */
static void setup (void) {
  snprintf(tmp, sizeof tmp, "/tmp/tp_test_config_%ld", (long)getpid());
  char p[512];
  mkdir(tmp, 0700);
  snprintf(p, sizeof p, "%s/conf", tmp); mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/conf/plugins", tmp); mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/conf/data", tmp); mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/conf/plugins/cfg.lua", tmp);
  write_file(p,
    "local opts = ...\n"
    "return { name = 'cfg.get', description = 'the config a plugin sees',\n"
    "  handler = function() return { cwd = opts.config.mcpServers.m.cwd,\n"
    "    tools = opts.config.tools[1], argv0 = opts.config.commands[1].argv0 } end }\n");
}

static void teardown (void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmp);
}

/* The number of lines of text. */
static int lines (const char *text) {
  int n = *text != '\0';
  for (; *text; text++) n += *text == '\n';
  return n;
}

static const char good[] =
  "{\"$schema\": \"./config.schema.json\",\n"
  " \"limits\": {\"memory\": \"32M\", \"timeout\": 2.5, \"tool_calls\": 50, \"cpu\": \"750ms\",\n"
  "            \"max_result\": 1024},\n"
  " \"tools\": [\"plugins\"],\n"
  " \"workspace\": {\"dir\": \"data\", \"max\": \"10M\"},\n"
  " \"mcpServers\": {\"m\": {\"command\": \"npx\", \"args\": [\"-y\", \"x\"], \"cwd\": \"data\",\n"
  "                        \"env\": {\"A\": \"b\"}, \"eager\": false, \"timeout_ms\": 60000,\n"
  "                        \"rename\": {\"a-b\": \"a_b2\"}, \"type\": \"stdio\",\n"
  "                        \"autoApprove\": [\"x\"], \"alwaysAllow\": [], \"timeout\": 5,\n"
  "                        \"description\": \"d\"},\n"
  "                  \"h\": {\"url\": \"https://example.com/mcp\", \"headers\": {\"X\": \"y\"},\n"
  "                        \"disabled\": true}},\n"
  " \"http\": {\"allow\": [\"api.github.com\", \"*.example.com\", {\"host\": \"x.com\",\n"
  "          \"methods\": [\"GET\"]}], \"allow_private\": [\"127.0.0.0/8\", \"::1/128\"],\n"
  "          \"inject\": {\"api.github.com\": {\"Authorization\": \"env:GITHUB_TOKEN\"}},\n"
  "          \"timeout_ms\": 30000, \"max_bytes\": 10485760},\n"
  " \"commands\": [{\"argv0\": \"git\", \"sub\": [\"status\", \"log\"], \"deny_flags\": [\"-c\"],\n"
  "               \"env\": {\"HOME\": \"env:HOME\"}, \"net\": false, \"timeout_ms\": 30000,\n"
  "               \"max_output\": 1048576}],\n"
  " \"policy\": {\"default\": \"allow\", \"rules\": [{\"tools\": \"git.**\", \"effect\": \"deny\"}]}}\n";

TEST(the_committed_schema_is_the_one_built_into_the_library) {
  const tp_embedded *em = tp__embedded_find("engine/host/config.schema.json");
  CHECK(em != NULL);
  FILE *f = fopen("engine/host/config.schema.json", "rb");
  CHECK(f != NULL);
  if (em == NULL || f == NULL) { if (f) fclose(f); return; }
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  CHECK_INT(n, em->len);
  CHECK(n == em->len && memcmp(buf, em->data, n) == 0);
  CHECK(tp_config_schema() == em->data);
}

TEST(the_schema_lists_every_limit_of_the_limits_table_and_nothing_else) {
  json_error_t je;
  json_t *schema = json_load_file("engine/host/config.schema.json", 0, &je);
  CHECK(schema != NULL);
  json_t *props = json_object_get(json_object_get(json_object_get(schema, "properties"),
                                                  "limits"), "properties");
  CHECK_INT(json_object_size(props), tp_limit_count());
  for (size_t i = 0; i < tp_limit_count(); i++) {
    const tp_limit_info *li = tp_limit_at(i);
    json_t *p = json_object_get(props, li->option);
    if (p == NULL) TP_FAIL_AT("the schema has no limit \"%s\"", li->option);
    static const char *const defs[] = { "#/$defs/size", "#/$defs/count", "#/$defs/duration" };
    CHECK_STR(json_string_value(json_object_get(p, "$ref")), defs[li->unit]);
    CHECK(json_is_string(json_object_get(p, "description")));
  }
  CHECK_STR(json_string_value(json_object_get(schema, "$schema")),
            "https://json-schema.org/draft/2020-12/schema");
  json_decref(schema);
}

TEST(a_good_file_gives_its_limits_tools_and_workspace_with_absolute_paths) {
  char dir[300], p[600];
  snprintf(dir, sizeof dir, "%s/conf", tmp);
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_configure_dir(e, good, strlen(good), dir), TP_OK);
  CHECK_STR(tp_engine_error(e), "");
  tp_limits l, def;
  tp_limits_init(&l);
  tp_limits_init(&def);
  l.output = 777;  /* not in the file: left as it was */
  CHECK_INT(tp_engine_config_limits(e, &l), TP_OK);
  CHECK_INT(l.memory, 32u << 20);
  CHECK_INT(l.wall_us, 2500000);
  CHECK_INT(l.cpu_us, 750000);
  CHECK_INT(l.tool_calls, 50);
  CHECK_INT(l.result, 1024);
  CHECK_INT(l.output, 777);
  CHECK_INT(l.tool_bytes, def.tool_bytes);
  snprintf(p, sizeof p, "%s/plugins", dir);
  CHECK_STR(tp_engine_config_tools(e, 0), p);
  CHECK(tp_engine_config_tools(e, 1) == NULL);
  uint64_t max = 0;
  snprintf(p, sizeof p, "%s/data", dir);
  CHECK_STR(tp_engine_config_workspace(e, &max), p);
  CHECK_INT(max, 10u << 20);
  CHECK_STR(json_string_value(json_object_get(json_object_get(
    tp__config_section(e, "mcpServers"), "m"), "cwd")), p);
  tp_engine_destroy(e);
}

TEST(plugins_see_the_sections_with_absolute_paths) {
  char dir[300], path[600], want[1400];
  snprintf(dir, sizeof dir, "%s/conf", tmp);
  snprintf(path, sizeof path, "%s/tidepool.json", dir);
  write_file(path, good);
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_configure_file(e, path), TP_OK);
  CHECK_INT(tp_engine_load_tools(e, tp_engine_config_tools(e, 0)), 1);
  char *env = NULL;
  const char *src = "return tools.cfg.get{}";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  snprintf(want, sizeof want, "\"result\":{\"argv0\":\"git\",\"cwd\":\"%s/data\","
           "\"tools\":\"%s/plugins\"}", dir, dir);
  CHECK_HAS(env, want);
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(relative_paths_of_a_file_named_relatively_start_at_its_folder) {
  char cwd[400], p[800];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK_INT(chdir(tmp), 0);
  write_file("conf/rel.json", "{\"tools\": [\"plugins\", \"/abs/x/../y\"], \"workspace\": \"data\"}");
  tp_engine *e = tp_engine_create();
  int rc = tp_engine_configure_file(e, "conf/rel.json");
  CHECK_INT(rc, TP_EINVAL);  /* /abs/x/../y does not exist */
  CHECK_STR(tp_engine_error(e), "config: /tools/1: \"/abs/x/../y\" is not a directory: "
            "No such file or directory");
  write_file("conf/rel.json", "{\"tools\": [\"plugins\"], \"workspace\": \"data\"}");
  CHECK_INT(tp_engine_configure_file(e, "conf/rel.json"), TP_OK);
  snprintf(p, sizeof p, "%s/conf/plugins", tmp);
  CHECK_STR(tp_engine_config_tools(e, 0), p);
  uint64_t max = 0;
  snprintf(p, sizeof p, "%s/conf/data", tmp);
  CHECK_STR(tp_engine_config_workspace(e, &max), p);
  CHECK(max == UINT64_MAX);  /* the file gives no max */
  tp_engine_destroy(e);
  CHECK_INT(chdir(cwd), 0);
}

TEST(without_a_folder_relative_paths_stay_relative_to_the_current_directory) {
  char cwd[400];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK_INT(chdir(tmp), 0);
  tp_engine *e = tp_engine_create();
  const char *t = "{\"tools\": [\"conf/plugins\"]}";
  CHECK_INT(tp_engine_configure(e, t, strlen(t)), TP_OK);
  CHECK_STR(tp_engine_config_tools(e, 0), "conf/plugins");
  t = "{\"tools\": [\"plugins\"]}";
  CHECK_INT(tp_engine_configure(e, t, strlen(t)), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "config: /tools/0: \"plugins\" is not a directory: "
            "No such file or directory");
  CHECK_STR(tp_engine_config_tools(e, 0), "conf/plugins");  /* the old config stays */
  tp_engine_destroy(e);
  CHECK_INT(chdir(cwd), 0);
}

/* The problems of text, checked without an engine (folder tmp/conf). */
static const char *problems (const char *text) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/conf", tmp);
  int rc = tp_config_check(text, strlen(text), dir, buf, sizeof buf);
  if (rc == TP_OK) return "(ok)";
  return buf;
}

TEST(a_type_error_names_the_path_what_was_expected_and_an_example) {
  CHECK_STR(problems("{\"mcpServers\": {\"memory\": {\"command\": \"npx\", \"args\": \"-y\"}}}"),
            "config: /mcpServers/memory/args: expected an array of strings, got a string; "
            "for example \"args\": [\"-y\",\"@modelcontextprotocol/server-memory\"]");
  CHECK_STR(problems("{\"commands\": [{\"argv0\": \"git\", \"env\": {\"A\": 1}}]}"),
            "config: /commands/0/env/A: expected a string, got an integer (1)");
  CHECK_STR(problems("{\"limits\": {\"timeout\": [1]}}"),
            "config: /limits/timeout: expected a number or a string, got an array; "
            "for example \"timeout\": \"2s\"");
  CHECK_STR(problems("{\"tools\": \"plugins\"}"),
            "config: /tools: expected an array of strings, got a string; "
            "for example \"tools\": [\"plugins\"]");
  CHECK_STR(problems("{\"http\": {\"allow\": [5]}}"),
            "config: /http/allow/0: expected a string or an object, got an integer (5); "
            "for example \"api.github.com\"");
}

TEST(an_unknown_section_is_an_error_with_the_closest_name) {
  CHECK_STR(problems("{\"polcy\": {}}"),
            "config: /polcy: unknown section \"polcy\" (did you mean \"policy\"?); the "
            "sections are: limits, tools, workspace, mcpServers, http, commands, policy, "
            "tool_settings, state, server, telemetry, auth");
  CHECK_STR(problems("{\"secrets\": {}}"),
            "config: /secrets: unknown section \"secrets\"; the sections are: limits, tools, "
            "workspace, mcpServers, http, commands, policy, tool_settings, state, server, "
            "telemetry, auth");
  CHECK_STR(problems("{\"mcpServers\": {\"m\": {\"comand\": \"x\", \"command\": \"y\"}}}"),
            "config: /mcpServers/m/comand: unknown field \"comand\" (did you mean "
            "\"command\"?); the fields are: command, args, env, cwd, url, headers, eager, "
            "timeout_ms, start_wait_ms, max_message, max_tools, max_descriptions, rename, type, "
            "disabled, autoApprove, alwaysAllow, timeout, description");
}

TEST(limit_values_are_checked_by_the_limits_parser) {
  CHECK_STR(problems("{\"limits\": {\"memory\": \"12Q\"}}"),
            "config: /limits/memory: bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)");
  CHECK_STR(problems("{\"limits\": {\"cpu\": -1}}"),
            "config: /limits/cpu: bad duration '-1' (it cannot be negative; 0 means no limit)");
  CHECK_STR(problems("{\"limits\": {\"tool_calls\": 4294967296}}"),
            "config: /limits/tool_calls: bad count '4294967296' (too large: at most 4294967295)");
  CHECK_STR(problems("{\"limits\": {\"tool_calls\": 1.5}}"),
            "config: /limits/tool_calls: expected an integer or a string, got a number (1.5); "
            "for example \"tool_calls\": 1000");
  CHECK_STR(problems("{\"limits\": {\"memory\": \"1K\"}}"),
            "config: /limits/memory: 1K is too small (at least 16K)");
  CHECK_STR(problems("{\"limits\": {\"wall_us\": 1}}"),
            "config: /limits/wall_us: unknown limit \"wall_us\" (did you mean \"timeout\"?); "
            "the limits are: memory, instructions, cpu, timeout, max_output, max_source, "
            "max_result, tool_calls, tool_calls_per_tool, tool_in_flight, tool_bytes, "
            "tool_timeout, fs_quota");
  CHECK_STR(problems("{\"limits\": {\"timeout\": \"1.5s\", \"memory\": 65536, \"fs_quota\": 0}}"),
            "(ok)");
  CHECK_STR(problems("{\"workspace\": {\"dir\": \"data\", \"max\": \"lots\"}}"),
            "config: /workspace/max: bad size 'lots' (use bytes or a suffix: 512K, 64M, 1G)");
}

TEST(a_server_needs_command_or_url_but_not_both) {
  CHECK_STR(problems("{\"mcpServers\": {\"m\": {\"args\": []}}}"),
            "config: /mcpServers/m: missing \"command\" (a server needs \"command\" (stdio) "
            "or \"url\" (Streamable HTTP))");
  CHECK_STR(problems("{\"mcpServers\": {\"m\": {\"command\": \"a\", \"url\": \"http://x\"}}}"),
            "config: /mcpServers/m: a server has \"command\" (stdio) or \"url\" (Streamable "
            "HTTP), not both");
  CHECK_STR(problems("{\"commands\": [{\"sub\": [\"x\"]}]}"),
            "config: /commands/0: missing \"argv0\" (the program, resolved in PATH when "
            "tidepool starts); for example \"argv0\": \"git\"");
}

TEST(every_problem_is_reported_not_only_the_first) {
  const char *t = "{\"polcy\": 1, \"tools\": 3, \"limits\": {\"memory\": \"x\"},"
                  " \"workspace\": \"nowhere\", \"commands\": [{}]}";
  const char *p = problems(t);
  CHECK_INT(lines(p), 5);
  /* by their JSON pointers, whichever check found them */
  CHECK(strstr(p, "/commands/0") < strstr(p, "/limits/memory"));
  CHECK(strstr(p, "/limits/memory") < strstr(p, "/polcy"));
  CHECK(strstr(p, "/polcy") < strstr(p, "/tools"));
  CHECK(strstr(p, "/tools") < strstr(p, "/workspace"));
  CHECK_HAS(p, "config: /polcy: unknown section");
  CHECK_HAS(p, "config: /tools: expected an array of strings, got an integer (3)");
  CHECK_HAS(p, "config: /limits/memory: bad size 'x'");
  CHECK_HAS(p, "config: /commands/0: missing \"argv0\"");
  CHECK_HAS(p, "config: /workspace: \"nowhere\" is not a directory (looked for ");
}

TEST(a_failed_configure_keeps_the_config_before_it) {
  tp_engine *e = tp_engine_create();
  const char *a = "{\"limits\": {\"tool_calls\": 7}}", *b = "{\"limits\": {\"tool_calls\": -7}}";
  CHECK_INT(tp_engine_configure(e, a, strlen(a)), TP_OK);
  CHECK_INT(tp_engine_configure(e, b, strlen(b)), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "config: /limits/tool_calls: bad count '-7' (it cannot be "
            "negative; 0 means no limit)");
  tp_limits l;
  tp_limits_init(&l);
  tp_engine_config_limits(e, &l);
  CHECK_INT(l.tool_calls, 7);
  tp_engine_destroy(e);
}

TEST(malformed_text_is_a_clear_error) {
  CHECK_STR(problems(""), "config: not valid JSON: unexpected token near end of file at "
            "line 1 column 0");
  CHECK_HAS(problems("{\"limits\": "), "config: not valid JSON: ");
  CHECK_STR(problems("[1]"), "config: expected a JSON object of sections at the top, got an "
            "array; for example {\"limits\": {\"timeout\": \"5s\"}, \"tools\": [\"plugins\"]}");
  CHECK_HAS(problems("{\"a\": 1, \"a\": 2}"), "config: not valid JSON: duplicate object key");
  CHECK_STR(problems("{\"tools\": [\"\\u0000x\"], \"workspace\": \"\"}"),
            "config: /tools/0: a path cannot hold a NUL character (\\u0000)\n"
            "config: /workspace: expected at least 1 character, got 0; for example "
            "\"workspace\": \"data\"");
  CHECK_STR(problems("{}"), "(ok)");
  /* bad JSON whose text says "out of memory" is bad JSON, not a shortage */
  CHECK_INT(tp_config_check("{\"out of memory\x01\": 1}", 20, NULL, buf, sizeof buf), TP_EINVAL);
  CHECK_STR(buf, "config: not valid JSON: control character 0x1 near '\"out of memory' at "
            "line 1 column 15");
  /* a key that is not valid UTF-8, and one with a slash, a tilde and a newline */
  CHECK_HAS(problems("{\"\xff\": 1}"), "config: not valid JSON: ");
  CHECK_STR(problems("{\"a/b~c\\n\": 1}"), "config: /a~1b~0c\\u000a: unknown section "
            "\"a/b~c\\u000a\"; the sections are: limits, tools, workspace, mcpServers, http, "
            "commands, policy, tool_settings, state, server, telemetry, auth");
  /* a long key is cut in the message, at a character */
  static char longkey[400];
  memset(longkey, 'a', 65);  /* "{\"" then 63 a's then two 2-byte characters */
  longkey[0] = '{';
  longkey[1] = '"';
  snprintf(longkey + 65, sizeof longkey - 65, "\u00e9\u00e9\": 1}");
  CHECK_HAS(problems(longkey), ": unknown section \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaa...\"; the sections are");
  CHECK_INT(tp_config_check(NULL, 0, NULL, buf, sizeof buf), TP_EINVAL);
  CHECK_INT(tp_config_check("{}", 2, NULL, NULL, 0), TP_OK);
  CHECK_INT(tp_config_check("{\"x\": 1}", 8, NULL, NULL, 0), TP_EINVAL);
  char small[16];
  CHECK_INT(tp_config_check("{\"x\": 1}", 8, NULL, small, sizeof small), TP_EINVAL);
  CHECK_STR(small, "config: /x: unk");
  CHECK_INT(tp_engine_configure(NULL, "{}", 2), TP_EINVAL);
  CHECK_INT(tp_engine_configure_file(NULL, "x"), TP_EINVAL);
  CHECK_INT(tp_engine_config_limits(NULL, NULL), TP_EINVAL);
  CHECK(tp_engine_config_tools(NULL, 0) == NULL);
  CHECK(tp_engine_config_workspace(NULL, NULL) == NULL);
}

TEST(a_missing_or_huge_file_is_a_clear_error) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_configure_file(e, "/nonexistent/tidepool.json"), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "config: cannot read: No such file or directory");
  char path[400];
  snprintf(path, sizeof path, "%s/huge.json", tmp);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  fputs("{\"policy\": {\"x\": \"", f);
  for (int i = 0; i < 17 * 1024; i++) fwrite(buf, 1, 1024, f) , memset(buf, 'a', 1024);
  fputs("\"}}", f);
  fclose(f);
  CHECK_INT(tp_engine_configure_file(e, path), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "config: cannot read: the file is larger than 16 MiB");
  CHECK_INT(tp_engine_configure_file(e, tmp), TP_EINVAL);  /* a directory */
  CHECK_STR(tp_engine_error(e), "config: cannot read: Is a directory");
  tp_engine_destroy(e);
}

TEST(deep_nesting_is_refused_with_its_place) {
  static char deep[20000];
  size_t o = (size_t)sprintf(deep, "{\"policy\": ");
  for (int i = 0; i < 100; i++) o += (size_t)sprintf(deep + o, "{\"a\": ");
  o += (size_t)sprintf(deep + o, "1");
  for (int i = 0; i < 101; i++) deep[o++] = '}';
  deep[o] = '\0';
  const char *p = problems(deep);
  CHECK_HAS(p, "config: /policy/a/a/a/");
  CHECK_HAS(p, ": nested too deeply (more than 64 levels); a config needs few levels: keep "
            "deep data out of it");
  CHECK_INT(lines(p), 1);
  /* deeper than the JSON reader goes */
  o = 0;
  for (int i = 0; i < 5000; i++) deep[o++] = '[';
  for (int i = 0; i < 5000; i++) deep[o++] = ']';
  deep[o] = '\0';
  CHECK_HAS(problems(deep), "config: not valid JSON: ");
}

TEST(thousands_of_problems_are_capped_and_counted) {
  size_t cap = 4000 * 24, o = 0;
  char *t = malloc(cap);
  CHECK(t != NULL);
  if (t == NULL) return;
  o += (size_t)sprintf(t, "{");
  for (int i = 0; i < 3000; i++) o += (size_t)sprintf(t + o, "%s\"s%d\": 1", i ? "," : "", i);
  sprintf(t + o, "}");
  const char *p = problems(t);
  CHECK_INT(lines(p), 65);
  CHECK_HAS(p, "\nconfig: and 2936 more problems past these");
  free(t);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  setup();
  RUN(the_committed_schema_is_the_one_built_into_the_library);
  RUN(the_schema_lists_every_limit_of_the_limits_table_and_nothing_else);
  RUN(a_good_file_gives_its_limits_tools_and_workspace_with_absolute_paths);
  RUN(plugins_see_the_sections_with_absolute_paths);
  RUN(relative_paths_of_a_file_named_relatively_start_at_its_folder);
  RUN(without_a_folder_relative_paths_stay_relative_to_the_current_directory);
  RUN(a_type_error_names_the_path_what_was_expected_and_an_example);
  RUN(an_unknown_section_is_an_error_with_the_closest_name);
  RUN(limit_values_are_checked_by_the_limits_parser);
  RUN(a_server_needs_command_or_url_but_not_both);
  RUN(every_problem_is_reported_not_only_the_first);
  RUN(a_failed_configure_keeps_the_config_before_it);
  RUN(malformed_text_is_a_clear_error);
  RUN(a_missing_or_huge_file_is_a_clear_error);
  RUN(deep_nesting_is_refused_with_its_place);
  RUN(thousands_of_problems_are_capped_and_counted);
  teardown();
  return tp_test_end();
}
