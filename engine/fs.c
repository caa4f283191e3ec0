/*
** fs.c: file operations confined to a workspace directory, for the fs.* plugin tools
** (tools/fs.lua). Host state only; the sandbox never sees these functions.
**
** The workspace root is opened once (O_PATH | O_DIRECTORY) and kept in a userdata.
** Every operation resolves its relative path from that descriptor, and the kernel does
** the confining: openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS refuses absolute
** paths, ".." above the root and symbolic links that lead out (even ones that come back
** in), at the moment of use, so there is no check-then-use window. Operations that do
** not open their target (stat, remove, mkdir, the rename of write) resolve the parent
** directory that way, pin it as a descriptor, and act on the final component with an
** *at() call that does not follow a symbolic link there. There are no string checks on
** the path beyond splitting off that final component.
**
** Without openat2 (ENOSYS, kernels before 5.6) the path is walked one component at a
** time with openat(O_NOFOLLOW): "..", absolute paths and every symbolic link are
** refused, which is stricter than the kernel's rule but never looser.
**
** Lua API (tp__open_fs pushes the table):
**   fs.open(root [, {walk = true}]) -> ws | nil, msg, code   walk: force the fallback
**   ws:read(path [, max_bytes])     -> content                 (default cap 4 MiB)
**   ws:write(path, content)         -> bytes                   temp file + renameat
**   ws:list(path [, max_entries])   -> {{name, type, size}...} sorted by name, truncated
**   ws:stat(path)                   -> {type, size, mtime}     does not follow a final link
**   ws:remove(path)                 -> true                    a file or an empty directory
**   ws:mkdir(path [, parents])      -> true
**   ws:close()
**   fs.resolver()                   -> "openat2" | "walk"
** Expected failures return nil, "<reason>: <path>", code; code is one of escape,
** not_found, not_dir, is_dir, exists, not_empty, denied, loop, symlink, too_large,
** invalid, io. Bad argument types and a closed workspace raise.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "lauxlib.h"
#include "internal.h"

#define WS_META "tidepool.fs.workspace"
#define SCOPE_META "tidepool.fs.scope"
#define READ_CAP_DEFAULT ((lua_Integer)4 << 20)
#define LIST_CAP_DEFAULT 10000
#define OPENAT2_RETRIES 8    /* EAGAIN: a rename raced the lookup; the kernel asks to retry */

/* Our own codes beside errno values, for failures the kernel does not name. */
enum { E_SYMLINK = 1000, E_NOTNAME, E_TOOBIG, E_NOTFILE };

typedef struct workspace {
  int fd;      /* O_PATH descriptor of the root, -1 once closed */
  int walk;    /* 1: resolve by walking components (no openat2) */
} workspace;

/* 1 while openat2 works, 0 once it answered ENOSYS (an old kernel, or valgrind). */
static atomic_int have_openat2 = 1;

/* ---- scope: what an operation holds, released even when Lua raises ------------------ */

/* A to-be-closed userdata owning descriptors, a directory stream and a C buffer, so a
** memory error raised while building the result leaks nothing. */
typedef struct scope {
  int fd[3];
  DIR *dir;
  void *buf;
} scope;

static void scope_release (scope *s) {
  for (int i = 0; i < 3; i++)
    if (s->fd[i] >= 0) { close(s->fd[i]); s->fd[i] = -1; }
  if (s->dir) { closedir(s->dir); s->dir = NULL; }
  free(s->buf);
  s->buf = NULL;
}

static int scope_gc (lua_State *L) {
  scope_release(luaL_checkudata(L, 1, SCOPE_META));
  return 0;
}

/* Pushes a new scope and marks it to be closed when the calling C function returns. */
static scope *scope_push (lua_State *L) {
  scope *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->fd[0] = s->fd[1] = s->fd[2] = -1;
  s->dir = NULL;
  s->buf = NULL;
  luaL_setmetatable(L, SCOPE_META);
  lua_toclose(L, -1);
  return s;
}

/* ---- errors ----------------------------------------------------------------------- */

static const char *err_code (int e) {
  switch (e) {
    case EXDEV: return "escape";
    case ENOENT: return "not_found";
    case ENOTDIR: return "not_dir";
    case EISDIR: return "is_dir";
    case EEXIST: return "exists";
    case ENOTEMPTY: return "not_empty";
    case EACCES: case EPERM: case EROFS: return "denied";
    case ELOOP: return "loop";
    case E_SYMLINK: return "symlink";
    case E_TOOBIG: return "too_large";
    case E_NOTNAME: case E_NOTFILE: case ENAMETOOLONG: case EINVAL: return "invalid";
    default: return "io";
  }
}

static const char *err_reason (int e) {
  switch (e) {
    case EXDEV: return "path escapes the workspace";
    case ENOENT: return "no such file or directory";
    case ENOTDIR: return "not a directory";
    case EISDIR: return "is a directory";
    case EEXIST: return "already exists";
    case ENOTEMPTY: return "directory is not empty";
    case EACCES: case EPERM: return "permission denied";
    case EROFS: return "read-only file system";
    case ELOOP: return "too many levels of symbolic links";
    case ENAMETOOLONG: return "path is too long";
    case E_SYMLINK: return "path goes through a symbolic link (not followed on this system)";
    case E_NOTNAME: return "path must name an entry inside the workspace";
    case E_NOTFILE: return "not a regular file";
    default: return strerror(e);
  }
}

/* Returns nil, "<reason>: <path>", code. */
static int fail (lua_State *L, int e, const char *path) {
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", err_reason(e), path);
  lua_pushstring(L, err_code(e));
  return 3;
}

/* ---- resolution ------------------------------------------------------------------- */

static workspace *check_ws (lua_State *L) {
  workspace *w = luaL_checkudata(L, 1, WS_META);
  if (w->fd < 0) luaL_error(L, "the workspace is closed");
  return w;
}

/* The path argument: a string without NUL bytes; "" means the root. */
static const char *check_path (lua_State *L, int arg) {
  size_t len;
  const char *p = luaL_checklstring(L, arg, &len);
  luaL_argcheck(L, strlen(p) == len, arg, "path contains a NUL byte");
  return len == 0 ? "." : p;
}

static int sys_openat2 (int dirfd, const char *path, int flags, unsigned long long mode) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (unsigned long long)flags;
  how.mode = mode;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* Walks path from w's root one component at a time, refusing "..", absolute paths and
** symbolic links. Intermediate components must be directories. Returns a descriptor
** opened with flags (O_NOFOLLOW added) or -errno (-E_* for our own). */
static int walk_open (const workspace *w, const char *path, int flags) {
  if (path[0] == '/') return -EXDEV;
  if (strlen(path) >= PATH_MAX) return -ENAMETOOLONG;
  char buf[PATH_MAX];
  strcpy(buf, path);
  /* The components, empty ones and "." dropped. */
  char *comp[PATH_MAX / 2 + 1];
  int n = 0;
  for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    if (strcmp(c, ".") == 0) continue;
    if (strcmp(c, "..") == 0) return -EXDEV;
    comp[n++] = c;
  }
  int cur = w->fd;
  if (n == 0) {
    int fd = openat(cur, ".", flags | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
  }
  for (int i = 0; i < n; i++) {
    int last = i == n - 1;
    int f = last ? (flags | O_NOFOLLOW | O_CLOEXEC)
                 : (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = openat(cur, comp[i], f);
    int e = errno;
    if (fd >= 0 && (!last || (flags & O_PATH))) {
      /* O_PATH | O_NOFOLLOW opens a symbolic link itself rather than failing. */
      struct stat st;
      if (fstat(fd, &st) != 0) e = errno, close(fd), fd = -1;
      else if (S_ISLNK(st.st_mode)) e = E_SYMLINK, close(fd), fd = -1;
      else if (!last && !S_ISDIR(st.st_mode)) e = ENOTDIR, close(fd), fd = -1;
    }
    else if (fd < 0 && e == ELOOP) e = E_SYMLINK;   /* O_NOFOLLOW met a link */
    else if (fd < 0 && e == ENOTDIR) {
      /* O_DIRECTORY | O_NOFOLLOW on a link reports ENOTDIR: say which it was. */
      struct stat st;
      if (fstatat(cur, comp[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        e = E_SYMLINK;
    }
    if (cur != w->fd) close(cur);
    if (fd < 0) return -e;
    cur = fd;
  }
  return cur;
}

/* Opens path beneath w's root with flags (O_CLOEXEC added). Returns the descriptor or
** -errno (-E_* for our own). EXDEV means the path, or a link on it, leads out of the workspace. */
static int ws_open (const workspace *w, const char *path, int flags, mode_t mode) {
  if (!w->walk && atomic_load(&have_openat2)) {
    for (int i = 0; i < OPENAT2_RETRIES; i++) {
      int fd = sys_openat2(w->fd, path, flags | O_CLOEXEC,
                           (flags & (O_CREAT | O_TMPFILE)) ? mode : 0);
      if (fd >= 0) return fd;
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno != ENOSYS) return -errno;
      atomic_store(&have_openat2, 0);
      break;
    }
    if (atomic_load(&have_openat2)) return -EAGAIN;
  }
  return walk_open(w, path, flags);
}

/* Splits path into the parent directory, opened beneath the root as dirfd, and the
** final component, copied to name (trailing slashes dropped). When the final
** component is not a plain name ("", ".", ".."), returns -E_NOTNAME unless the whole
** path escapes, which is reported as such. Returns 0 or -errno (-E_* for our own). */
static int open_parent (const workspace *w, const char *path, int *dirfd, char *name) {
  size_t len = strlen(path);
  if (len >= PATH_MAX) return -ENAMETOOLONG;
  char buf[PATH_MAX];
  memcpy(buf, path, len + 1);
  while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
  char *slash = strrchr(buf, '/');
  const char *final = slash ? slash + 1 : buf;
  if (final[0] == '\0' || strcmp(final, ".") == 0 || strcmp(final, "..") == 0) {
    int fd = ws_open(w, path, O_PATH | O_DIRECTORY, 0);
    if (fd < 0) return fd;
    close(fd);
    return -E_NOTNAME;
  }
  if (strlen(final) > NAME_MAX) return -ENAMETOOLONG;
  strcpy(name, final);
  const char *parent = ".";
  if (slash == buf) parent = "/";          /* absolute: the kernel refuses it */
  else if (slash) { *slash = '\0'; parent = buf; }
  int fd = ws_open(w, parent, O_PATH | O_DIRECTORY, 0);
  if (fd < 0) return fd;
  *dirfd = fd;
  return 0;
}

/* Whether path's final component is ".", ".." or empty (it names a directory that is
** the root or an ancestor of a named entry rather than an entry itself). */
static int names_dir_itself (const char *path) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  size_t start = len;
  while (start > 0 && path[start - 1] != '/') start--;
  size_t n = len - start;
  return n == 0 || (n == 1 && path[start] == '.') ||
         (n == 2 && path[start] == '.' && path[start + 1] == '.');
}

static const char *type_name (mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

/* ---- operations ------------------------------------------------------------------- */

/* fs.open(root [, opts]) -> ws | nil, msg, code */
static int fs_open (lua_State *L) {
  const char *root = luaL_checkstring(L, 1);
  int walk = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "walk");
    walk = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  workspace *w = lua_newuserdatauv(L, sizeof *w, 0);
  w->fd = -1;
  w->walk = walk;
  luaL_setmetatable(L, WS_META);
  int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    lua_pushnil(L);
    lua_pushfstring(L, "cannot open the workspace: %s: %s", err_reason(e), root);
    lua_pushstring(L, err_code(e));
    return 3;
  }
  w->fd = fd;
  return 1;
}

static int ws_close (lua_State *L) {
  workspace *w = luaL_checkudata(L, 1, WS_META);
  if (w->fd >= 0) { close(w->fd); w->fd = -1; }
  return 0;
}

static int ws_tostring (lua_State *L) {
  workspace *w = luaL_checkudata(L, 1, WS_META);
  lua_pushstring(L, w->fd >= 0 ? "fs.workspace" : "fs.workspace (closed)");
  return 1;
}

/* ws:read(path [, max_bytes]) -> content */
static int ws_read (lua_State *L) {
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  lua_Integer cap = luaL_optinteger(L, 3, READ_CAP_DEFAULT);
  luaL_argcheck(L, cap >= 0, 3, "negative byte cap");
  scope *s = scope_push(L);
  /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
  int fd = ws_open(w, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
  if (fd < 0) return fail(L, -fd, path);
  s->fd[0] = fd;
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(L, errno, path);
  if (S_ISDIR(st.st_mode)) return fail(L, EISDIR, path);
  if (!S_ISREG(st.st_mode)) return fail(L, E_NOTFILE, path);
  if (st.st_size > cap) goto too_big;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t total = 0;
  for (;;) {
    size_t want = 64 * 1024;
    char *p = luaL_prepbuffsize(&b, want);
    ssize_t n = read(fd, p, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(L, errno, path);
    }
    if (n == 0) break;
    luaL_addsize(&b, (size_t)n);
    total += (size_t)n;
    if (total > (size_t)cap) goto too_big;   /* the file grew while read */
  }
  luaL_pushresult(&b);
  return 1;
too_big:
  lua_pushnil(L);
  lua_pushfstring(L, "file is larger than the read limit of %I bytes: %s", cap, path);
  lua_pushstring(L, err_code(E_TOOBIG));
  return 3;
}

static int write_all (int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* ws:write(path, content) -> bytes
** Writes a temporary file in the target's directory and renames it over the target, so
** readers see the old content or the new, never a part. A symbolic link at the target
** is replaced, not written through. An existing file's permission bits are kept. */
static int ws_write (lua_State *L) {
  static atomic_uint counter;
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  size_t len;
  const char *data = luaL_checklstring(L, 3, &len);
  scope *s = scope_push(L);
  char name[NAME_MAX + 1], tmp[64];
  int rc = open_parent(w, path, &s->fd[0], name);
  if (rc < 0) return fail(L, rc == -E_NOTNAME ? EISDIR : -rc, path);
  int dir = s->fd[0];
  struct stat st;
  int keep_mode = -1;
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode)) return fail(L, EISDIR, path);
    if (S_ISREG(st.st_mode)) keep_mode = (int)(st.st_mode & 07777);
  }
  int fd = -1;
  for (int i = 0; i < 16 && fd < 0; i++) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(tmp, sizeof tmp, ".tidepool-%ld-%u-%lx.tmp", (long)getpid(),
             atomic_fetch_add(&counter, 1), (unsigned long)ts.tv_nsec);
    fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) return fail(L, errno, path);
  }
  if (fd < 0) return fail(L, EEXIST, path);
  s->fd[1] = fd;
  int e = write_all(fd, data, len);
  if (e == 0 && keep_mode >= 0 && fchmod(fd, (mode_t)keep_mode) != 0) e = -errno;
  if (e == 0 && renameat(dir, tmp, dir, name) != 0) e = -errno;
  if (e != 0) {
    unlinkat(dir, tmp, 0);
    return fail(L, -e, path);
  }
  lua_pushinteger(L, (lua_Integer)len);
  return 1;
}

static int cmp_str (const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ws:list(path [, max_entries]) -> entries, truncated
** entries: {name, type, size} sorted by name; a symbolic link is listed as "symlink"
** with the size of the link itself. */
static int ws_list (lua_State *L) {
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  lua_Integer cap = luaL_optinteger(L, 3, LIST_CAP_DEFAULT);
  luaL_argcheck(L, cap >= 0, 3, "negative entry cap");
  scope *s = scope_push(L);
  int fd = ws_open(w, path, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0) return fail(L, -fd, path);
  s->fd[0] = fd;
  int fd2 = dup(fd);                 /* closedir closes its own descriptor */
  if (fd2 < 0) return fail(L, errno, path);
  s->dir = fdopendir(fd2);
  if (s->dir == NULL) { int e = errno; close(fd2); return fail(L, e, path); }
  lua_newtable(L);                   /* names */
  int names = lua_gettop(L);
  lua_Integer n = 0;
  struct dirent *d;
  errno = 0;
  while ((d = readdir(s->dir)) != NULL) {
    if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) continue;
    lua_pushstring(L, d->d_name);
    lua_rawseti(L, names, ++n);
    errno = 0;
  }
  if (errno != 0) return fail(L, errno, path);
  const char **v = NULL;
  if (n > 0) {
    v = malloc((size_t)n * sizeof *v);
    if (v == NULL) return luaL_error(L, "not enough memory");
    s->buf = v;
  }
  for (lua_Integer i = 0; i < n; i++) {
    lua_rawgeti(L, names, i + 1);
    v[i] = lua_tostring(L, -1);      /* kept alive by the names table */
    lua_pop(L, 1);
  }
  if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_str);
  lua_Integer keep = n < cap ? n : cap;
  lua_createtable(L, (int)keep, 0);
  for (lua_Integer i = 0; i < keep; i++) {
    struct stat st;
    lua_createtable(L, 0, 3);
    lua_pushstring(L, v[i]);
    lua_setfield(L, -2, "name");
    if (fstatat(fd, v[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
      lua_pushstring(L, type_name(st.st_mode));
      lua_setfield(L, -2, "type");
      lua_pushinteger(L, (lua_Integer)st.st_size);
      lua_setfield(L, -2, "size");
    }
    else {                           /* removed while listed */
      lua_pushstring(L, "other");
      lua_setfield(L, -2, "type");
      lua_pushinteger(L, 0);
      lua_setfield(L, -2, "size");
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushboolean(L, keep < n);
  return 2;
}

static void push_stat (lua_State *L, const struct stat *st) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, type_name(st->st_mode));
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)st->st_size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, (lua_Integer)st->st_mtim.tv_sec);
  lua_setfield(L, -2, "mtime");
}

/* ws:stat(path) -> {type, size, mtime}; a final symbolic link is not followed. */
static int ws_stat (lua_State *L) {
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  scope *s = scope_push(L);
  struct stat st;
  if (names_dir_itself(path)) {      /* ".", "a/..": the directory itself */
    int fd = ws_open(w, path, O_PATH | O_DIRECTORY, 0);
    if (fd < 0) return fail(L, -fd, path);
    s->fd[0] = fd;
    if (fstat(fd, &st) != 0) return fail(L, errno, path);
    push_stat(L, &st);
    return 1;
  }
  char name[NAME_MAX + 1];
  int rc = open_parent(w, path, &s->fd[0], name);
  if (rc < 0) return fail(L, -rc, path);
  if (fstatat(s->fd[0], name, &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(L, errno, path);
  push_stat(L, &st);
  return 1;
}

/* ws:remove(path) -> true; a file, a symbolic link (not its target) or an empty
** directory. */
static int ws_remove (lua_State *L) {
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  scope *s = scope_push(L);
  char name[NAME_MAX + 1];
  int rc = open_parent(w, path, &s->fd[0], name);
  if (rc < 0) return fail(L, -rc, path);
  if (unlinkat(s->fd[0], name, 0) != 0) {
    if (errno != EISDIR) return fail(L, errno, path);
    if (unlinkat(s->fd[0], name, AT_REMOVEDIR) != 0)
      return fail(L, errno == EEXIST ? ENOTEMPTY : errno, path);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* Creates the directory path names (its parent must exist). 0, or -errno (-E_* for our own). */
static int make_dir (const workspace *w, const char *path, int exist_ok) {
  char name[NAME_MAX + 1];
  int dir = -1;
  int rc = open_parent(w, path, &dir, name);
  if (rc == -E_NOTNAME && exist_ok) return 0;   /* ".", "a/..": exists, if it resolved */
  if (rc < 0) return rc;
  rc = 0;
  if (mkdirat(dir, name, 0777) != 0) {
    rc = -errno;
    if (rc == -EEXIST && exist_ok) {
      /* A directory, or a link to one that the rules let us follow. */
      int fd = ws_open(w, path, O_PATH | O_DIRECTORY, 0);
      if (fd < 0) rc = fd;
      else { close(fd); rc = 0; }
    }
  }
  close(dir);
  return rc;
}

/* ws:mkdir(path [, parents]) -> true
** With parents, each missing ancestor is made in turn, every one resolved from the
** root again, and existing directories are fine (as mkdir -p). */
static int ws_mkdir (lua_State *L) {
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  int parents = lua_toboolean(L, 3);
  if (!parents) {
    int rc = make_dir(w, path, 0);
    if (rc < 0) return fail(L, rc == -E_NOTNAME ? EEXIST : -rc, path);
    lua_pushboolean(L, 1);
    return 1;
  }
  size_t len = strlen(path);
  if (len >= PATH_MAX) return fail(L, ENAMETOOLONG, path);
  char buf[PATH_MAX];
  memcpy(buf, path, len + 1);
  for (size_t i = 1; i <= len; i++) {
    if (i < len && buf[i] != '/') continue;
    if (buf[i - 1] == '/') continue;          /* "a//b", or a leading "/" */
    char c = buf[i];
    buf[i] = '\0';
    int rc = make_dir(w, buf, 1);
    buf[i] = c;
    if (rc < 0) return fail(L, -rc, path);
  }
  if (path[0] == '/') return fail(L, EXDEV, path);   /* "/" alone made nothing */
  lua_pushboolean(L, 1);
  return 1;
}

/* fs.resolver() -> "openat2" or "walk": how paths are resolved on this system. */
static int fs_resolver (lua_State *L) {
  if (atomic_load(&have_openat2)) {
    int fd = sys_openat2(AT_FDCWD, ".", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd >= 0) close(fd);
    else if (errno == ENOSYS) atomic_store(&have_openat2, 0);
  }
  lua_pushstring(L, atomic_load(&have_openat2) ? "openat2" : "walk");
  return 1;
}

/* ---- opening ---------------------------------------------------------------------- */

static const luaL_Reg ws_methods[] = {
  {"read", ws_read}, {"write", ws_write}, {"list", ws_list}, {"stat", ws_stat},
  {"remove", ws_remove}, {"mkdir", ws_mkdir}, {"close", ws_close}, {NULL, NULL}
};

/* Pushes the fs table: open, and every method as a plain function taking the workspace
** first. */
int tp__open_fs (lua_State *L) {
  if (luaL_newmetatable(L, SCOPE_META)) {
    lua_pushcfunction(L, scope_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, scope_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, WS_META)) {
    luaL_newlib(L, ws_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, ws_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, ws_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, ws_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "fs.workspace");
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  luaL_newlib(L, ws_methods);
  lua_pushcfunction(L, fs_open);
  lua_setfield(L, -2, "open");
  lua_pushcfunction(L, fs_resolver);
  lua_setfield(L, -2, "resolver");
  return 1;
}
