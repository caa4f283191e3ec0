/*
** proc.c: what the proc.run tool (tools/proc.lua) needs from C, in the host state only.
** The command itself is spawned by tools/proc.lua through luv (uv_spawn on the engine's
** loop) as libexec/tidepool-confine, which confines itself and execve's the command; this
** file finds that helper and the programs, and checks directories.
**
** Lua API (tp__open_proc pushes the table):
**   proc.resolve(name, path)   -> abs, dir | nil, msg   name: a program name looked up in
**                              path (a PATH string), or an absolute path; abs: the path to
**                              execute, dir: the directory of its real file (symbolic
**                              links resolved), to make readable for it
**   proc.helper()              -> path | nil, msg       tidepool-confine: $TIDEPOOL_CONFINE,
**                              else next to the program, else next to (or above) the
**                              library or Lua module holding this code, else LIBEXECDIR
**   proc.landlock_abi()        -> n                     0: no Landlock in this kernel
**   proc.beneath(root, rel)    -> real | nil, msg       rel resolved under root (symbolic
**                              links followed) must stay inside it and be a directory
**   proc.mkdtemp()             -> dir | nil, msg        a fresh private directory
**   proc.rmtree(dir [, max])   -> true | nil, msg       removes dir and what it holds
**                              (at most max entries, default 100000; links not followed)
**   proc.input(text)           -> fd | nil, msg         a memory file holding text, read
**                              from its start, for a command's stdin: the command reads a
**                              file, so writing to it never blocks the loop, and a command
**                              that exits without reading cannot raise SIGPIPE in the
**                              engine's process (libuv does not ignore it, nor may a
**                              library change the program's signal dispositions). The
**                              caller closes fd (uv.fs_close) once the command started.
** Bad argument types raise.
*/
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lauxlib.h"
#include "host.h"

#ifndef TP_LIBEXECDIR
#define TP_LIBEXECDIR "/usr/local/libexec/tidepool"
#endif
#define HELPER "tidepool-confine"

static int executable_file (const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int push_resolved (lua_State *L, const char *abs) {
  char real[PATH_MAX];
  if (realpath(abs, real) == NULL) {
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", abs, strerror(errno));
    return 2;
  }
  char *slash = strrchr(real, '/');
  if (slash == real) slash[1] = '\0';
  else *slash = '\0';
  lua_pushstring(L, abs);
  lua_pushstring(L, real);
  return 2;
}

static int l_resolve (lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const char *path = luaL_optstring(L, 2, "/usr/local/bin:/usr/bin:/bin");
  if (name[0] == '\0') {
    luaL_pushfail(L);
    lua_pushliteral(L, "an empty program name");
    return 2;
  }
  if (strchr(name, '/') != NULL) {
    if (name[0] != '/') {
      luaL_pushfail(L);
      lua_pushfstring(L, "%s: a program path must be absolute (or a bare name looked up "
                      "in PATH)", name);
      return 2;
    }
    if (!executable_file(name)) {
      luaL_pushfail(L);
      lua_pushfstring(L, "%s: no executable file there", name);
      return 2;
    }
    return push_resolved(L, name);
  }
  const char *p = path;
  char buf[PATH_MAX];
  while (*p) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    /* an empty element means the current directory: never for a confined command */
    if (n > 0 && p[0] == '/' && n + strlen(name) + 2 <= sizeof buf) {
      memcpy(buf, p, n);
      buf[n] = '/';
      strcpy(buf + n + 1, name);
      if (executable_file(buf)) return push_resolved(L, buf);
    }
    p += n + (end != NULL);
  }
  luaL_pushfail(L);
  lua_pushfstring(L, "%s: not found in PATH (%s)", name, path);
  return 2;
}

/* dir/HELPER into buf when it is an executable file there. */
static int helper_in (char *buf, size_t size, const char *dir, size_t dirlen) {
  if (dirlen + sizeof HELPER + 1 > size) return 0;
  memcpy(buf, dir, dirlen);
  buf[dirlen] = '/';
  memcpy(buf + dirlen + 1, HELPER, sizeof HELPER);
  return executable_file(buf);
}

static int l_helper (lua_State *L) {
  char buf[PATH_MAX], self[PATH_MAX];
  const char *env = getenv("TIDEPOOL_CONFINE");
  if (env != NULL && env[0] != '\0') {
    if (env[0] == '/' && executable_file(env)) { lua_pushstring(L, env); return 1; }
    luaL_pushfail(L);
    lua_pushfstring(L, "TIDEPOOL_CONFINE=%s is not an executable file's absolute path", env);
    return 2;
  }
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash && helper_in(buf, sizeof buf, self, (size_t)(slash - self))) goto found;
  }
  Dl_info info;
  if (dladdr((void *)l_helper, &info) && info.dli_fname && info.dli_fname[0] == '/') {
    snprintf(self, sizeof self, "%s", info.dli_fname);
    for (int up = 0; up < 2; up++) {  /* build/lua/tidepool.so -> build/ */
      char *slash = strrchr(self, '/');
      if (slash == NULL || slash == self) break;
      *slash = '\0';
      if (helper_in(buf, sizeof buf, self, strlen(self))) goto found;
    }
  }
  if (helper_in(buf, sizeof buf, TP_LIBEXECDIR, strlen(TP_LIBEXECDIR))) goto found;
  luaL_pushfail(L);
  lua_pushliteral(L, HELPER " not found (next to the program, next to the library, in "
                  TP_LIBEXECDIR ", or at $TIDEPOOL_CONFINE)");
  return 2;
found:
  lua_pushstring(L, buf);
  return 1;
}

static int l_landlock_abi (lua_State *L) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1U /* VERSION */);
  lua_pushinteger(L, abi < 0 ? 0 : abi);
  return 1;
}

static int l_beneath (lua_State *L) {
  const char *root = luaL_checkstring(L, 1);
  const char *rel = luaL_checkstring(L, 2);
  char rroot[PATH_MAX], joined[PATH_MAX], real[PATH_MAX];
  if (realpath(root, rroot) == NULL) {
    luaL_pushfail(L);
    lua_pushfstring(L, "the workspace %s: %s", root, strerror(errno));
    return 2;
  }
  if (rel[0] == '/') {
    if (snprintf(joined, sizeof joined, "%s", rel) >= (int)sizeof joined) goto toolong;
  }
  else if (snprintf(joined, sizeof joined, "%s/%s", rroot, rel) >= (int)sizeof joined)
    goto toolong;
  if (realpath(joined, real) == NULL) {
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", rel, strerror(errno));
    return 2;
  }
  size_t rl = strlen(rroot);
  if (strncmp(real, rroot, rl) != 0 || (real[rl] != '\0' && real[rl] != '/' &&
                                        strcmp(rroot, "/") != 0)) {
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: escapes the workspace (it resolves to %s)", rel, real);
    return 2;
  }
  struct stat st;
  if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: not a directory", rel);
    return 2;
  }
  lua_pushstring(L, real);
  return 1;
toolong:
  luaL_pushfail(L);
  lua_pushfstring(L, "%s: path too long", rel);
  return 2;
}

static int l_mkdtemp (lua_State *L) {
  const char *tmp = getenv("TMPDIR");
  char buf[PATH_MAX];
  if (tmp == NULL || tmp[0] != '/') tmp = "/tmp";
  if (snprintf(buf, sizeof buf, "%s/tidepool-proc-XXXXXX", tmp) >= (int)sizeof buf ||
      mkdtemp(buf) == NULL) {
    luaL_pushfail(L);
    lua_pushfstring(L, "cannot make a temporary directory in %s: %s", tmp, strerror(errno));
    return 2;
  }
  lua_pushstring(L, buf);
  return 1;
}

/* Removes what directory fd holds (fd is closed); *left counts entries down. */
static int rm_in (int fd, long *left, int depth) {
  DIR *d = fdopendir(fd);
  if (d == NULL) { close(fd); return -1; }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (--*left < 0 || depth > 256) { errno = E2BIG; rc = -1; break; }
    if (unlinkat(dirfd(d), de->d_name, 0) == 0) continue;
    if (errno != EISDIR && errno != EPERM) { rc = -1; break; }
    int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0 || rm_in(sub, left, depth + 1) != 0 ||
        unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) != 0) rc = -1;
  }
  closedir(d);
  return rc;
}

static int l_rmtree (lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  long left = (long)luaL_optinteger(L, 2, 100000);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || rm_in(fd, &left, 0) != 0 || rmdir(dir) != 0) {
    luaL_pushfail(L);
    lua_pushfstring(L, "cannot remove %s: %s", dir, strerror(errno));
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_input (lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  int fd = memfd_create("tidepool-stdin", MFD_CLOEXEC);
  if (fd < 0) {  /* no memfd (before Linux 3.17): an unnamed file of the temporary dir */
    const char *tmp = getenv("TMPDIR");
    fd = open(tmp && tmp[0] == '/' ? tmp : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) goto fail;
  for (size_t off = 0; off < len; ) {
    ssize_t n = write(fd, text + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { int e = errno; close(fd); errno = e; goto fail; }
    off += (size_t)n;
  }
  if (lseek(fd, 0, SEEK_SET) != 0) { int e = errno; close(fd); errno = e; goto fail; }
  lua_pushinteger(L, fd);
  return 1;
fail:
  luaL_pushfail(L);
  lua_pushfstring(L, "cannot hold the command's stdin: %s", strerror(errno));
  return 2;
}

int tp__open_proc (lua_State *L) {
  static const luaL_Reg fns[] = {
    { "resolve", l_resolve }, { "helper", l_helper }, { "landlock_abi", l_landlock_abi },
    { "beneath", l_beneath }, { "mkdtemp", l_mkdtemp }, { "rmtree", l_rmtree },
    { "input", l_input },
    { NULL, NULL } };
  luaL_newlib(L, fns);
  return 1;
}
