/*
** test_fs.c: the workspace-confined file functions of engine/host/fs.c, driven through a
** plain Lua state in a temporary directory. Every escape attempt is its own test and
** must fail with the exact message; the race tests swap a directory and a link to the
** outside while the other thread works through that path.
**
** Layout made by setup():   TMP/ws/            the workspace (ws in Lua)
**                           TMP/outside/secret  "SECRET", never to be reached
*/
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

#include "host.h"
#include "tp_test.h"

static char tmp[256], wsdir[300], outdir[300];
static char result[4096];

static const char helpers[] =
  "local function ser(v)\n"
  "  if type(v) ~= 'table' then return tostring(v) end\n"
  "  local keys, parts = {}, {}\n"
  "  for k in pairs(v) do keys[#keys + 1] = k end\n"
  "  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)\n"
  "  for _, k in ipairs(keys) do\n"
  "    parts[#parts + 1] = (math.type(k) == 'integer' and '' or k .. '=') .. ser(v[k])\n"
  "  end\n"
  "  return '{' .. table.concat(parts, ',') .. '}'\n"
  "end\n"
  "function show(v, msg, code)\n"
  "  if v == nil then return tostring(msg) .. ' [' .. tostring(code) .. ']' end\n"
  "  return ser(v)\n"
  "end\n";

/* Runs a chunk and returns its first result as a string (or "error: ..."). */
static const char *ev (lua_State *L, const char *code) {
  if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
    snprintf(result, sizeof result, "error: %s", lua_tostring(L, -1));
  }
  else {
    const char *s = luaL_tolstring(L, -1, NULL);
    snprintf(result, sizeof result, "%s", s);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return result;
}

/* rm -rf dir (a test's own temporary tree). */
static void rm_rf (const char *dir) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("# command failed: %s\n", cmd);
}

static void put (const char *dir, const char *name, const char *content) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  if (f) { fputs(content, f); fclose(f); }
}

static int exists (const char *dir, const char *name) {
  char p[600];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return lstat(p, &st) == 0;
}

static void link_in_ws (const char *target, const char *name) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", wsdir, name);
  if (symlink(target, p) != 0) printf("# symlink %s failed: %s\n", p, strerror(errno));
}

/* A fresh workspace and outside directory; a Lua state with fs, ws (kernel
** resolution) and wsw (the component walk). */
static lua_State *setup (void) {
  rm_rf(tmp);
  if (mkdir(tmp, 0700) != 0 || mkdir(wsdir, 0700) != 0 || mkdir(outdir, 0700) != 0)
    printf("# setup: %s\n", strerror(errno));
  put(outdir, "secret", "SECRET");
  lua_State *L = luaL_newstate();
  *(void **)lua_getextraspace(L) = NULL;   /* no pattern meter (lua_patch.h) */
  luaL_openlibs(L);
  luaL_requiref(L, "fs", tp__open_fs, 1);
  lua_pop(L, 1);
  lua_pushstring(L, wsdir);
  lua_setglobal(L, "ROOT");
  if (luaL_dostring(L, helpers) != LUA_OK) printf("# helpers: %s\n", lua_tostring(L, -1));
  ev(L, "ws = assert(fs.open(ROOT)); wsw = assert(fs.open(ROOT, {walk = true}))");
  return L;
}

/* Kernel resolution tests need openat2; valgrind, for one, does not know it. */
static int no_openat2 (lua_State *L) {
  if (strcmp(ev(L, "return fs.resolver()"), "openat2") == 0) return 0;
  printf("# skipped: openat2 is not available here\n");
  return 1;
}
#define NEED_OPENAT2(L) do { if (no_openat2(L)) { teardown(L); return; } } while (0)

static void teardown (lua_State *L);
static void teardown (lua_State *L) {
  lua_close(L);
  rm_rf(tmp);
}

/* ---- normal operations ------------------------------------------------------------ */

TEST(write_then_read_round_trips_bytes) {
  lua_State *L = setup();
  CHECK_STR(ev(L, "return show(ws:write('a.txt', 'hello'))"), "5");
  CHECK_STR(ev(L, "return show(ws:read('a.txt'))"), "hello");
  CHECK_STR(ev(L, "return show(ws:write('a.txt', 'x\\0y'))"), "3");
  CHECK_STR(ev(L, "return #ws:read('a.txt') == 3 and ws:read('a.txt') == 'x\\0y'"), "true");
  CHECK_STR(ev(L, "return show(ws:write('empty', ''))"), "0");
  CHECK_STR(ev(L, "return show(ws:read('empty'))"), "");
  teardown(L);
}

TEST(write_leaves_no_temporary_file_and_keeps_the_mode) {
  lua_State *L = setup();
  put(wsdir, "run.sh", "old");
  char p[600];
  snprintf(p, sizeof p, "%s/run.sh", wsdir);
  chmod(p, 0750);
  CHECK_STR(ev(L, "return show(ws:write('run.sh', 'new'))"), "3");
  struct stat st;
  CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0750);
  CHECK_STR(ev(L, "return show(ws:list(''))"), "{{name=run.sh,size=3,type=file}}");
  teardown(L);
}

TEST(write_replaces_a_link_instead_of_writing_through_it) {
  lua_State *L = setup();
  put(wsdir, "target.txt", "target");
  link_in_ws("target.txt", "lnk");
  CHECK_STR(ev(L, "return show(ws:write('lnk', 'mine'))"), "4");
  CHECK_STR(ev(L, "return show(ws:read('target.txt'))"), "target");
  CHECK_STR(ev(L, "return show(ws:stat('lnk').type)"), "file");
  teardown(L);
}

TEST(read_follows_a_link_that_stays_inside) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  put(wsdir, "target.txt", "target");
  ev(L, "ws:mkdir('sub')");
  link_in_ws("../target.txt", "sub/up");
  link_in_ws("sub", "sublink");
  CHECK_STR(ev(L, "return show(ws:read('sub/up'))"), "target");
  CHECK_STR(ev(L, "return show(ws:read('sublink/up'))"), "target");
  teardown(L);
}

TEST(read_cap_refuses_larger_files) {
  lua_State *L = setup();
  ev(L, "ws:write('a.txt', 'hello')");
  CHECK_STR(ev(L, "return show(ws:read('a.txt', 5))"), "hello");
  CHECK_STR(ev(L, "return show(ws:read('a.txt', 4))"),
            "file is larger than the read limit of 4 bytes: a.txt [too_large]");
  teardown(L);
}

TEST(list_is_sorted_with_types_and_sizes) {
  lua_State *L = setup();
  ev(L, "ws:write('b.txt', 'bb'); ws:write('a.txt', 'a'); ws:mkdir('c')");
  link_in_ws("a.txt", "d");
  CHECK_STR(ev(L, "return (show(ws:list('.')):gsub('size=%d+,type=directory', "
               "'size=N,type=directory'))"),
            "{{name=a.txt,size=1,type=file},{name=b.txt,size=2,type=file},"
            "{name=c,size=N,type=directory},{name=d,size=5,type=symlink}}");
  CHECK_STR(ev(L, "local e, t = ws:list('', 2) return #e .. ' ' .. e[2].name .. ' ' .. "
               "tostring(t)"), "2 b.txt true");
  CHECK_STR(ev(L, "local e, t = ws:list('c') return #e .. ' ' .. tostring(t)"), "0 false");
  CHECK_STR(ev(L, "return show(ws:list('a.txt'))"), "not a directory: a.txt [not_dir]");
  CHECK_STR(ev(L, "return show(ws:list('nope'))"), "no such file or directory: nope [not_found]");
  teardown(L);
}

TEST(stat_reports_type_size_mtime_without_following_a_final_link) {
  lua_State *L = setup();
  ev(L, "ws:write('a.txt', 'hello')");
  link_in_ws("/etc", "etc");
  CHECK_STR(ev(L, "local s = ws:stat('a.txt') "
               "return s.type .. ' ' .. s.size .. ' ' .. tostring(math.abs(s.mtime - os.time()) < 60)"),
            "file 5 true");
  CHECK_STR(ev(L, "return ws:stat('etc').type"), "symlink");
  CHECK_STR(ev(L, "return ws:stat('').type .. ws:stat('.').type"), "directorydirectory");
  CHECK_STR(ev(L, "return show(ws:stat('nope'))"), "no such file or directory: nope [not_found]");
  teardown(L);
}

TEST(mkdir_with_and_without_parents) {
  lua_State *L = setup();
  CHECK_STR(ev(L, "return show(ws:mkdir('x/y/z'))"), "no such file or directory: x/y/z [not_found]");
  CHECK_STR(ev(L, "return show(ws:mkdir('x/y/z', true))"), "true");
  CHECK_STR(ev(L, "return show(ws:mkdir('x/y/z/', true))"), "true");
  CHECK_STR(ev(L, "return show(ws:mkdir('x//y/./w', true))"), "true");
  CHECK_STR(ev(L, "return ws:stat('x/y/w').type"), "directory");
  CHECK_STR(ev(L, "return show(ws:mkdir('x'))"), "already exists: x [exists]");
  CHECK_STR(ev(L, "return show(ws:mkdir('q'))"), "true");
  ev(L, "ws:write('f', '1')");
  CHECK_STR(ev(L, "return show(ws:mkdir('f/g', true))"), "not a directory: f/g [not_dir]");
  CHECK_STR(ev(L, "return show(ws:mkdir('f', true))"), "not a directory: f [not_dir]");
  teardown(L);
}

TEST(remove_files_links_and_empty_directories_only) {
  lua_State *L = setup();
  ev(L, "ws:mkdir('d/e', true); ws:write('d/e/f', '1')");
  link_in_ws("d", "lnk");
  CHECK_STR(ev(L, "return show(ws:remove('d'))"), "directory is not empty: d [not_empty]");
  CHECK_STR(ev(L, "return show(ws:remove('lnk'))"), "true");
  CHECK(exists(wsdir, "d/e/f"));
  CHECK_STR(ev(L, "return show(ws:remove('d/e/f'))"), "true");
  CHECK_STR(ev(L, "return show(ws:remove('d/e'))"), "true");
  CHECK_STR(ev(L, "return show(ws:remove('d/'))"), "true");
  CHECK_STR(ev(L, "return show(ws:list(''))"), "{}");
  CHECK_STR(ev(L, "return show(ws:remove('d'))"), "no such file or directory: d [not_found]");
  teardown(L);
}

TEST(the_root_itself_is_not_an_entry) {
  lua_State *L = setup();
  ev(L, "ws:mkdir('a')");
  CHECK_STR(ev(L, "return show(ws:remove('.'))"),
            "path must name an entry inside the workspace: . [invalid]");
  CHECK_STR(ev(L, "return show(ws:remove(''))"),
            "path must name an entry inside the workspace: . [invalid]");
  CHECK_STR(ev(L, "return show(ws:write('.', 'x'))"), "is a directory: . [is_dir]");
  CHECK_STR(ev(L, "return show(ws:mkdir('.'))"), "already exists: . [exists]");
  CHECK_STR(ev(L, "return show(ws:read('a'))"), "is a directory: a [is_dir]");
  CHECK_STR(ev(L, "return show(ws:write('a', 'x'))"), "is a directory: a [is_dir]");
  teardown(L);
}

TEST(dot_dot_that_stays_inside_is_resolved_by_the_kernel) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  ev(L, "ws:mkdir('a'); ws:write('b.txt', 'b')");
  CHECK_STR(ev(L, "return show(ws:read('a/../b.txt'))"), "b");
  CHECK_STR(ev(L, "return ws:stat('a/..').type"), "directory");
  CHECK_STR(ev(L, "return show(ws:remove('a/..'))"),
            "path must name an entry inside the workspace: a/.. [invalid]");
  teardown(L);
}

TEST(bad_arguments_and_closed_workspaces_raise) {
  lua_State *L = setup();
  CHECK_HAS(ev(L, "return ws:read('a\\0b')"), "path contains a NUL byte");
  CHECK_HAS(ev(L, "return ws:read(nil)"), "string expected");
  CHECK_HAS(ev(L, "return fs.read({}, 'x')"), "fs.workspace expected");
  CHECK_HAS(ev(L, "local w = fs.open(ROOT) w:close() w:close() return w:read('x')"),
            "the workspace is closed");
  CHECK_STR(ev(L, "do local w <close> = fs.open(ROOT) W = w end return tostring(W)"),
            "fs.workspace (closed)");
  CHECK_HAS(ev(L, "return show(fs.open(ROOT .. '/nope'))"),
            "cannot open the workspace: no such file or directory: /tmp/");
  teardown(L);
}

/* ---- escapes: kernel resolution ---------------------------------------------------- */

#define ESCAPE(path) "path escapes the workspace: " path " [escape]"

TEST(escape_dot_dot) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  CHECK_STR(ev(L, "return show(ws:read('../outside/secret'))"), ESCAPE("../outside/secret"));
  CHECK_STR(ev(L, "return show(ws:read('..'))"), ESCAPE(".."));
  CHECK_STR(ev(L, "return show(ws:stat('..'))"), ESCAPE(".."));
  CHECK_STR(ev(L, "return show(ws:list('..'))"), ESCAPE(".."));
  CHECK_STR(ev(L, "return show(ws:write('../outside/new', 'x'))"), ESCAPE("../outside/new"));
  CHECK_STR(ev(L, "return show(ws:mkdir('../outside/d', true))"), ESCAPE("../outside/d"));
  CHECK_STR(ev(L, "return show(ws:mkdir('../x'))"), ESCAPE("../x"));
  CHECK_STR(ev(L, "return show(ws:remove('../outside/secret'))"), ESCAPE("../outside/secret"));
  CHECK_STR(ev(L, "return show(ws:remove('..'))"), ESCAPE(".."));
  CHECK(exists(outdir, "secret"));
  CHECK(!exists(outdir, "new") && !exists(outdir, "d") && !exists(tmp, "x"));
  teardown(L);
}

TEST(escape_absolute_path) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  CHECK_STR(ev(L, "return show(ws:read('/etc/passwd'))"), ESCAPE("/etc/passwd"));
  CHECK_STR(ev(L, "return show(ws:stat('/etc/passwd'))"), ESCAPE("/etc/passwd"));
  CHECK_STR(ev(L, "return show(ws:stat('/'))"), ESCAPE("/"));
  CHECK_STR(ev(L, "return show(ws:list('/'))"), ESCAPE("/"));
  CHECK_STR(ev(L, "return show(ws:mkdir('/', true))"), ESCAPE("/"));
  CHECK_STR(ev(L, "return show(ws:mkdir('/tmp/tp-x', true))"), ESCAPE("/tmp/tp-x"));
  CHECK_STR(ev(L, "return show(ws:remove('/x'))"), ESCAPE("/x"));
  teardown(L);
}

TEST(escape_dot_dot_below_a_subdirectory) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  ev(L, "ws:mkdir('a')");
  CHECK_STR(ev(L, "return show(ws:read('a/../../outside/secret'))"),
            ESCAPE("a/../../outside/secret"));
  CHECK_STR(ev(L, "return show(ws:write('a/../../x', 'x'))"), ESCAPE("a/../../x"));
  CHECK_STR(ev(L, "return show(ws:stat('a/../..'))"), ESCAPE("a/../.."));
  CHECK(!exists(tmp, "x"));
  teardown(L);
}

TEST(escape_symlink_to_etc) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  link_in_ws("/etc", "etc");
  CHECK_STR(ev(L, "return show(ws:read('etc/passwd'))"), ESCAPE("etc/passwd"));
  CHECK_STR(ev(L, "return show(ws:list('etc'))"), ESCAPE("etc"));
  CHECK_STR(ev(L, "return show(ws:stat('etc/passwd'))"), ESCAPE("etc/passwd"));
  CHECK_STR(ev(L, "return show(ws:write('etc/tp-test', 'x'))"), ESCAPE("etc/tp-test"));
  CHECK_STR(ev(L, "return show(ws:remove('etc/hostname'))"), ESCAPE("etc/hostname"));
  teardown(L);
}

TEST(escape_symlink_to_a_directory_outside_then_a_file_through_it) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  link_in_ws("../outside", "out");
  CHECK_STR(ev(L, "return show(ws:read('out/secret'))"), ESCAPE("out/secret"));
  CHECK_STR(ev(L, "return show(ws:list('out'))"), ESCAPE("out"));
  CHECK_STR(ev(L, "return show(ws:write('out/new', 'x'))"), ESCAPE("out/new"));
  CHECK_STR(ev(L, "return show(ws:write('out/secret', 'x'))"), ESCAPE("out/secret"));
  CHECK_STR(ev(L, "return show(ws:mkdir('out/d'))"), ESCAPE("out/d"));
  CHECK_STR(ev(L, "return show(ws:mkdir('out/d/e', true))"), ESCAPE("out/d/e"));
  CHECK_STR(ev(L, "return show(ws:remove('out/secret'))"), ESCAPE("out/secret"));
  CHECK_STR(ev(L, "return show(ws:stat('out/secret'))"), ESCAPE("out/secret"));
  CHECK(exists(outdir, "secret"));
  CHECK(!exists(outdir, "new") && !exists(outdir, "d"));
  teardown(L);
}

TEST(escape_symlink_out_and_back_in) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  ev(L, "ws:mkdir('a'); ws:write('a/f', 'f')");
  link_in_ws("../ws/a", "inout");
  char abs[600];
  snprintf(abs, sizeof abs, "%s/a", wsdir);
  link_in_ws(abs, "absin");
  CHECK_STR(ev(L, "return show(ws:read('inout/f'))"), ESCAPE("inout/f"));
  CHECK_STR(ev(L, "return show(ws:read('absin/f'))"), ESCAPE("absin/f"));
  teardown(L);
}

TEST(escape_symlink_loop) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  link_in_ws("loop", "loop");
  link_in_ws("ping", "pong");
  link_in_ws("pong", "ping");
  CHECK_STR(ev(L, "return show(ws:read('loop'))"),
            "too many levels of symbolic links: loop [loop]");
  CHECK_STR(ev(L, "return show(ws:read('ping/x'))"),
            "too many levels of symbolic links: ping/x [loop]");
  CHECK_STR(ev(L, "return show(ws:list('pong'))"),
            "too many levels of symbolic links: pong [loop]");
  CHECK_STR(ev(L, "return ws:stat('loop').type"), "symlink");
  teardown(L);
}

TEST(escape_proc_magic_link) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  link_in_ws("/proc/self/root", "root");
  link_in_ws("../../../../../../../../../proc/self/cwd", "cwd");
  CHECK_STR(ev(L, "return show(ws:read('root/etc/passwd'))"), ESCAPE("root/etc/passwd"));
  CHECK_STR(ev(L, "return show(ws:list('cwd'))"), ESCAPE("cwd"));
  teardown(L);
}

TEST(escape_directory_replaced_by_a_symlink_between_calls) {
  lua_State *L = setup();
  NEED_OPENAT2(L);
  CHECK_STR(ev(L, "ws:mkdir('d') return show(ws:write('d/secret', 'mine'))"), "4");
  CHECK_STR(ev(L, "return show(ws:read('d/secret'))"), "mine");
  char d[600];
  snprintf(d, sizeof d, "%s/d", wsdir);
  rm_rf(d);
  link_in_ws("../outside", "d");
  CHECK_STR(ev(L, "return show(ws:read('d/secret'))"), ESCAPE("d/secret"));
  CHECK_STR(ev(L, "return show(ws:write('d/secret', 'x'))"), ESCAPE("d/secret"));
  CHECK_STR(ev(L, "return show(ws:remove('d/secret'))"), ESCAPE("d/secret"));
  CHECK_STR(ev(L, "return show(ws:read('d/../ws/d/secret'))"), ESCAPE("d/../ws/d/secret"));
  CHECK_STR(ev(L, "return show(wsw:read('d/secret'))"),
            "path goes through a symbolic link (not followed on this system): d/secret [symlink]");
  teardown(L);
}

/* ---- races: a directory and a link to the outside swap places all the time ---------- */

static atomic_int racing;

static void *swapper (void *arg) {
  (void)arg;
  char a[600], b[600];
  snprintf(a, sizeof a, "%s/d", wsdir);
  snprintf(b, sizeof b, "%s/swap", wsdir);
  while (atomic_load(&racing))
    renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
  return NULL;
}

static void race (int walk) {
  lua_State *L = setup();
  if (!walk) NEED_OPENAT2(L);
  ev(L, "ws:mkdir('d'); ws:write('d/secret', 'inside')");
  link_in_ws("../outside", "swap");
  put(outdir, "x", "outside");
  lua_pushboolean(L, walk);
  lua_setglobal(L, "WALK");
  atomic_store(&racing, 1);
  pthread_t th;
  pthread_create(&th, NULL, swapper, NULL);
  CHECK_STR(ev(L,
    "local w = WALK and wsw or ws\n"
    "local seen = {}\n"
    "for i = 1, 3000 do\n"
    "  local v, msg, code = w:read('d/secret')\n"
    "  seen[v or code] = true\n"
    "  w:write('d/secret', 'inside')\n"
    "  w:remove('d/other'); w:mkdir('d/sub'); w:remove('d/sub')\n"
    "  local e = w:list('d')\n"
    "  for _, x in ipairs(e or {}) do if x.name == 'x' then seen.listed_outside = true end end\n"
    "end\n"
    "local allowed = {inside = true, escape = true, symlink = WALK, not_dir = WALK,\n  not_found = true}\n"
    "local bad = {}\n"
    "for k in pairs(seen) do if not allowed[k] then bad[#bad + 1] = k end end\n"
    "table.sort(bad)\n"
    "local raced = seen.inside and (seen.escape or seen.symlink or seen.not_dir) or false\n"
    "return 'unexpected: ' .. table.concat(bad, ',') .. '; raced: ' .. tostring(raced)"),
    "unexpected: ; raced: true");
  atomic_store(&racing, 0);
  pthread_join(th, NULL);
  char p[600];
  snprintf(p, sizeof p, "%s/secret", outdir);
  FILE *f = fopen(p, "rb");
  char buf[64] = {0};
  if (f) { size_t n = fread(buf, 1, sizeof buf - 1, f); buf[n] = '\0'; fclose(f); }
  CHECK_STR(buf, "SECRET");
  CHECK(!exists(outdir, "sub"));
  teardown(L);
}

TEST(race_swapping_a_directory_and_an_outside_link_never_reaches_outside) { race(0); }
TEST(race_in_the_component_walk_never_reaches_outside) { race(1); }

/* ---- the component walk (kernels without openat2) ---------------------------------- */

#define SYMLINK_MSG(path) \
  "path goes through a symbolic link (not followed on this system): " path " [symlink]"

TEST(walk_refuses_dot_dot_absolute_and_every_link) {
  lua_State *L = setup();
  ev(L, "wsw:mkdir('a'); wsw:write('a/f', 'f')");
  link_in_ws("/etc", "etc");
  link_in_ws("a", "ina");
  link_in_ws("loop", "loop");
  CHECK_STR(ev(L, "return show(wsw:read('../outside/secret'))"), ESCAPE("../outside/secret"));
  CHECK_STR(ev(L, "return show(wsw:read('a/../a/f'))"), ESCAPE("a/../a/f"));
  CHECK_STR(ev(L, "return show(wsw:read('/etc/passwd'))"), ESCAPE("/etc/passwd"));
  CHECK_STR(ev(L, "return show(wsw:stat('/'))"), ESCAPE("/"));
  CHECK_STR(ev(L, "return show(wsw:read('etc/passwd'))"), SYMLINK_MSG("etc/passwd"));
  CHECK_STR(ev(L, "return show(wsw:list('etc'))"), SYMLINK_MSG("etc"));
  CHECK_STR(ev(L, "return show(wsw:read('ina/f'))"), SYMLINK_MSG("ina/f"));
  CHECK_STR(ev(L, "return show(wsw:read('ina'))"), SYMLINK_MSG("ina"));
  CHECK_STR(ev(L, "return show(wsw:read('loop'))"), SYMLINK_MSG("loop"));
  CHECK_STR(ev(L, "return show(wsw:write('etc/x', 'x'))"), SYMLINK_MSG("etc/x"));
  CHECK_STR(ev(L, "return show(wsw:mkdir('ina/x', true))"), SYMLINK_MSG("ina/x"));
  CHECK_STR(ev(L, "return wsw:stat('etc').type"), "symlink");
  teardown(L);
}

TEST(walk_does_the_normal_operations) {
  lua_State *L = setup();
  CHECK_STR(ev(L, "return show(wsw:mkdir('x/y', true))"), "true");
  CHECK_STR(ev(L, "return show(wsw:write('x/y/f', 'abc'))"), "3");
  CHECK_STR(ev(L, "return show(wsw:read('./x//y/f'))"), "abc");
  CHECK_STR(ev(L, "return wsw:list('x')[1].name .. wsw:list('x')[1].type"), "ydirectory");
  CHECK_STR(ev(L, "return show(wsw:stat('x/y/f'))" ":gsub('mtime=%d+', 'mtime=T')"),
            "{mtime=T,size=3,type=file}");
  CHECK_STR(ev(L, "return show(wsw:remove('x/y/f'))"), "true");
  CHECK_STR(ev(L, "return show(wsw:read('x/y/f'))"), "no such file or directory: x/y/f [not_found]");
  teardown(L);
}

/* ---- tools/fs.lua, the plugin over these functions ---------------------------------- */

/* Loads tools/fs.lua as the plugin loader does (require("tidepool.fs") preloaded, the
** chunk called with {workspace = ...}) into TOOLS, a table by tool name. */
static void load_plugin (lua_State *L, int with_workspace) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, tp__open_fs);
  lua_setfield(L, -2, "tidepool.fs");
  lua_pop(L, 1);
  lua_pushboolean(L, with_workspace);
  lua_setglobal(L, "WITH_WS");
  CHECK_STR(ev(L,
    "local chunk = assert(loadfile('tools/fs.lua'))\n"
    "local list = chunk(WITH_WS and {workspace = ROOT} or {})\n"
    "TOOLS = {}\n"
    "for _, t in ipairs(list) do TOOLS[t.name] = t end\n"
    "return #list"), with_workspace ? "6" : "0");
}

TEST(plugin_offers_no_tools_without_a_workspace) {
  lua_State *L = setup();
  load_plugin(L, 0);
  teardown(L);
}

TEST(plugin_tools_call_the_confined_functions) {
  lua_State *L = setup();
  load_plugin(L, 1);
  CHECK_STR(ev(L, "local ctx = {workspace = ROOT}\n"
                  "TOOLS['fs.mkdir'].handler({path = 'a/b', parents = true}, ctx)\n"
                  "local w = TOOLS['fs.write'].handler({path = 'a/b/f.txt', content = 'hi'}, ctx)\n"
                  "local r = TOOLS['fs.read'].handler({path = 'a/b/f.txt'}, ctx)\n"
                  "local l = TOOLS['fs.list'].handler({}, ctx)\n"
                  "local s = TOOLS['fs.stat'].handler({path = 'a/b/f.txt'}, ctx)\n"
                  "local x = TOOLS['fs.remove'].handler({path = 'a/b/f.txt'}, ctx)\n"
                  "return w.bytes .. r.content .. l.entries[1].name .. tostring(l.truncated) .."
                  " s.type .. s.size .. tostring(x.removed)"), "2hiafalsefile2true");
  CHECK_STR(ev(L, "local ok, err = pcall(TOOLS['fs.read'].handler, {path = '../outside/secret'},"
                  " {workspace = ROOT}) return err.message"),
            "path escapes the workspace: ../outside/secret");
  put(wsdir, "bin", "\xff\xfe");
  CHECK_STR(ev(L, "local ok, err = pcall(TOOLS['fs.read'].handler, {path = 'bin'}, {}) return err.message"),
            "not UTF-8 text (fs.read returns text files only): bin");
  teardown(L);
}

/* ---- quotas ---------------------------------------------------------------------- */

TEST(write_is_charged_its_length_at_least_4k_and_refused_past_what_is_left) {
  lua_State *L = setup();
  CHECK_STR(ev(L, "return select(2, ws:write('a', 'hi', 10000, 10000))"), "4096");
  CHECK_STR(ev(L, "return select(2, ws:write('b', ('x'):rep(5000), 10000, 10000))"), "5000");
  CHECK_STR(ev(L, "return show(ws:write('c', ('x'):rep(5000), 4999, 10000))"),
            "writing c needs 4.9 KiB but the run's write quota of 9.8 KiB has 4.9 KiB left; "
            "write less in one run: fewer or smaller files [quota]");
  CHECK_STR(ev(L, "return show(ws:stat('c'))"), "no such file or directory: c [not_found]");
  CHECK_STR(ev(L, "return select(2, ws:write('d', 'x'))"), "4096");   /* no quota given */
  teardown(L);
}

TEST(growth_is_one_account_for_every_workspace_object_of_a_directory) {
  lua_State *L = setup();
  CHECK_STR(ev(L, "local w1 = assert(fs.open(ROOT, {max_growth = 12288}))\n"
                  "local w2 = assert(fs.open(ROOT .. '/.', {max_growth = 12288}))\n"
                  "assert(w1:write('a', 'x')) assert(w2:write('b', 'x'))\n"
                  "local g = w1:growth()\n"
                  "local ok = w2:write('c', ('x'):rep(4097))\n"
                  "local r = {g, ok == nil, select(2, w2:write('c', ('x'):rep(4097)))}\n"
                  "assert(w1:remove('a'))\n"
                  "r[4] = w2:growth()\n"
                  "r[5] = w2:write('c', ('x'):rep(4097))\n"
                  "w1:close() w2:close() return show(r)"),
            "{8192,true,writing c needs 8 KiB but the workspace's growth cap is 12 KiB over "
            "the 0 bytes it held at start, and 4 KiB of it is left; remove files you no "
            "longer need (fs.remove) or write less,4096,4097}");
  teardown(L);
}

TEST(overwrites_count_the_difference_and_removes_give_back) {
  lua_State *L = setup();
  CHECK_STR(ev(L, "local w = assert(fs.open(ROOT, {max_growth = 8192}))\n"
                  "for i = 1, 50 do assert(w:write('same', ('x'):rep(8000))) end\n"
                  "local g1 = w:growth()\n"
                  "assert(w:write('same', 'small'))\n"
                  "local g2 = w:growth()\n"
                  "assert(w:remove('same'))\n"
                  "local g3 = w:growth() w:close() return g1 .. ' ' .. g2 .. ' ' .. g3"),
            "8192 4096 0");
  teardown(L);
}

TEST(mkdir_parents_stops_at_the_quota_and_reports_what_it_spent) {
  lua_State *L = setup();
  CHECK_STR(ev(L, "return show({ws:mkdir('p/q/r/s', true, 8192, 8192)})"),
            "{making the directory p/q/r/s needs 4 KiB but the run's write quota of 8 KiB "
            "has 0 bytes left; write less in one run: fewer or smaller files,quota,8192}");
  CHECK_STR(ev(L, "return ws:stat('p/q').type .. ' ' .. show(ws:stat('p/q/r'))"),
            "directory no such file or directory: p/q/r [not_found]");
  CHECK_STR(ev(L, "return select(2, ws:mkdir('p/q', true, 0, 8192))"), "0");  /* exists */
  teardown(L);
}

TEST(the_first_open_scans_what_the_workspace_holds) {
  lua_State *L = setup();
  ev(L, "ws:close() wsw:close()");   /* the account goes with its last object */
  put(wsdir, "f", "0123456789");
  char sub[400];
  snprintf(sub, sizeof sub, "%s/sub", wsdir);
  mkdir(sub, 0700);
  CHECK_STR(ev(L, "local w = assert(fs.open(ROOT)) local r = {w:growth()} w:close() return show(r)"),
            "{0,0,8192,false}");
  teardown(L);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  snprintf(tmp, sizeof tmp, "/tmp/tp-fs-test-XXXXXX");
  if (mkdtemp(tmp) == NULL) { perror("mkdtemp"); return 1; }
  snprintf(wsdir, sizeof wsdir, "%s/ws", tmp);
  snprintf(outdir, sizeof outdir, "%s/outside", tmp);
  RUN(write_then_read_round_trips_bytes);
  RUN(write_leaves_no_temporary_file_and_keeps_the_mode);
  RUN(write_replaces_a_link_instead_of_writing_through_it);
  RUN(read_follows_a_link_that_stays_inside);
  RUN(read_cap_refuses_larger_files);
  RUN(list_is_sorted_with_types_and_sizes);
  RUN(stat_reports_type_size_mtime_without_following_a_final_link);
  RUN(mkdir_with_and_without_parents);
  RUN(remove_files_links_and_empty_directories_only);
  RUN(the_root_itself_is_not_an_entry);
  RUN(dot_dot_that_stays_inside_is_resolved_by_the_kernel);
  RUN(bad_arguments_and_closed_workspaces_raise);
  RUN(escape_dot_dot);
  RUN(escape_absolute_path);
  RUN(escape_dot_dot_below_a_subdirectory);
  RUN(escape_symlink_to_etc);
  RUN(escape_symlink_to_a_directory_outside_then_a_file_through_it);
  RUN(escape_symlink_out_and_back_in);
  RUN(escape_symlink_loop);
  RUN(escape_proc_magic_link);
  RUN(escape_directory_replaced_by_a_symlink_between_calls);
  RUN(race_swapping_a_directory_and_an_outside_link_never_reaches_outside);
  RUN(race_in_the_component_walk_never_reaches_outside);
  RUN(walk_refuses_dot_dot_absolute_and_every_link);
  RUN(walk_does_the_normal_operations);
  RUN(plugin_offers_no_tools_without_a_workspace);
  RUN(plugin_tools_call_the_confined_functions);
  RUN(write_is_charged_its_length_at_least_4k_and_refused_past_what_is_left);
  RUN(growth_is_one_account_for_every_workspace_object_of_a_directory);
  RUN(overwrites_count_the_difference_and_removes_give_back);
  RUN(mkdir_parents_stops_at_the_quota_and_reports_what_it_spent);
  RUN(the_first_open_scans_what_the_workspace_holds);
  rm_rf(tmp);
  return tp_test_end();
}
