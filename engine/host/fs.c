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
**   fs.open(root [, {walk = true, max_growth = bytes}]) -> ws | nil, msg, code
**                                   walk: force the fallback; max_growth: see below
**   ws:read(path [, max_bytes])     -> content                 (default cap 4 MiB)
**   ws:write(path, content [, left, quota]) -> bytes, charged  temp file + renameat
**   ws:list(path [, max_entries])   -> {{name, type, size}...} sorted by name, truncated
**   ws:stat(path)                   -> {type, size, mtime}     does not follow a final link
**   ws:remove(path)                 -> true                    a file or an empty directory
**   ws:mkdir(path [, parents [, left, quota]]) -> true, charged
**   ws:growth()                     -> grown, max_growth, base, base_partial
**   ws:close()
**   fs.resolver()                   -> "openat2" | "walk"
** Expected failures return nil, "<reason>: <path>", code; code is one of escape,
** not_found, not_dir, is_dir, exists, not_empty, denied, loop, symlink, too_large,
** invalid, io, quota. Bad argument types and a closed workspace raise.
**
** Quotas. Writing costs bytes of two budgets, checked before anything is written:
**   - the caller's (a run's --fs-quota): left and quota, in bytes (left < 0 or absent:
**     none). A write is charged its length, at least ENTRY_BYTES (every write makes a
**     file); each directory mkdir creates is charged ENTRY_BYTES. The charge is the
**     second result; the caller keeps the account.
**   - the workspace's growth (max_growth, 0 = none): the net bytes on disk the fs
**     functions added since the workspace was first opened in this process (an entry
**     takes at least ENTRY_BYTES, sizes round up to it; an overwrite counts the
**     difference, a remove gives back). Every workspace object of the same directory
**     in the process (several engines, MCP workers) shares one account. When first
**     opened the directory is scanned (du-like, capped in entries and time) for the
**     messages' "held at start".
** Past either: nil, a message naming the budget and what is left, "quota".
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

#include <pthread.h>

#include <linux/openat2.h>

#include "util.h"
#include "lauxlib.h"
#include "host.h"

#define WS_META "tidepool.fs.workspace"
#define SCOPE_META "tidepool.fs.scope"
#define READ_CAP_DEFAULT ((lua_Integer)4 << 20)
#define LIST_CAP_DEFAULT 10000
#define OPENAT2_RETRIES 8    /* EAGAIN: a rename raced the lookup; the kernel asks to retry */

#define ENTRY_BYTES 4096     /* what an entry costs at least: a block and an inode */
/* The set-up scan stops after SCAN_MAX_ENTRIES entries or SCAN_MAX_NS, whichever
** comes first (it reads the clock every 64 entries): it runs once per workspace and
** process, inside the first fs call, and 20000 entries took 70-130 ms on the loaded
** 2-core test machine. Its result is a lower bound then, said so in messages. */
#define SCAN_MAX_ENTRIES 20000
#define SCAN_MAX_NS ((uint64_t)20 * 1000000)
#define SCAN_MAX_DEPTH 64

/* Our own codes beside errno values, for failures the kernel does not name. */
enum { E_SYMLINK = 1000, E_NOTNAME, E_TOOBIG, E_NOTFILE };

/* The growth account of one workspace directory, shared by every workspace object of
** it in the process (under growth_mu), freed with the last one. */
typedef struct growth {
  struct growth *next;
  dev_t dev;
  ino_t ino;
  int refs;
  uint64_t base;       /* bytes on disk at the first open (scanned) */
  int partial;         /* the scan stopped at its cap: base is a lower bound */
  int64_t grown;       /* net bytes the fs functions added since */
} growth;

static pthread_mutex_t growth_mu = PTHREAD_MUTEX_INITIALIZER;
static growth *growths;

typedef struct workspace {
  int fd;      /* O_PATH descriptor of the root, -1 once closed */
  int walk;    /* 1: resolve by walking components (no openat2) */
  growth *g;   /* NULL once closed */
  uint64_t max_growth;  /* 0: none */
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

/* ---- quotas ---------------------------------------------------------------------- */

/* Bytes on disk of a file of n bytes, as the quotas count them. */
static uint64_t disk_bytes (uint64_t n) {
  if (n <= ENTRY_BYTES) return ENTRY_BYTES;
  if (n > UINT64_MAX - ENTRY_BYTES) return UINT64_MAX / 2;
  return (n + ENTRY_BYTES - 1) / ENTRY_BYTES * ENTRY_BYTES;
}

static void human (char *buf, size_t len, uint64_t n) {
  static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
  if (n < 1024) { snprintf(buf, len, "%llu bytes", (unsigned long long)n); return; }
  double v = (double)n / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) { v /= 1024; u++; }
  if (v == (double)(uint64_t)v) snprintf(buf, len, "%.0f %s", v, units[u]);
  else snprintf(buf, len, "%.1f %s", v, units[u]);
}

/* The caller's budget: args left and quota at idx, idx + 1; left < 0 when there is none. */
typedef struct budget { lua_Integer left, quota, spent; } budget;

static budget check_budget (lua_State *L, int idx) {
  budget b;
  b.left = luaL_optinteger(L, idx, -1);
  b.quota = luaL_optinteger(L, idx + 1, 0);
  b.spent = 0;
  return b;
}

/* nil, msg, "quota": the run's budget cannot pay need more bytes. */
static int fail_run_quota (lua_State *L, const budget *b, uint64_t need, const char *what,
                           const char *path) {
  char q[32], left[32], n[32];
  human(q, sizeof q, (uint64_t)b->quota);
  human(left, sizeof left, (uint64_t)(b->left > b->spent ? b->left - b->spent : 0));
  human(n, sizeof n, need);
  lua_pushnil(L);
  lua_pushfstring(L, "%s %s needs %s but the run's write quota of %s has %s left; "
                  "write less in one run: fewer or smaller files", what, path, n, q, left);
  lua_pushliteral(L, "quota");
  return 3;
}

/* Takes delta bytes of w's growth account; 0, or -1 (nothing taken) past max_growth.
** A negative delta gives back. */
static int growth_take (workspace *w, int64_t delta, uint64_t *left) {
  pthread_mutex_lock(&growth_mu);
  growth *g = w->g;
  int rc = 0;
  int64_t room = w->max_growth ? (int64_t)(w->max_growth > INT64_MAX ? INT64_MAX :
                                          w->max_growth) - g->grown : INT64_MAX;
  if (left) *left = room > 0 ? (uint64_t)room : 0;
  if (delta > 0 && w->max_growth && delta > room) rc = -1;
  else g->grown += delta;
  pthread_mutex_unlock(&growth_mu);
  return rc;
}

/* nil, msg, "quota": the workspace's growth cap cannot take need more bytes. */
static int fail_growth (lua_State *L, workspace *w, uint64_t need, uint64_t room,
                        const char *what, const char *path) {
  char cap[32], left[32], n[32], base[32];
  human(cap, sizeof cap, w->max_growth);
  human(left, sizeof left, room);
  human(n, sizeof n, need);
  pthread_mutex_lock(&growth_mu);
  human(base, sizeof base, w->g->base);
  int partial = w->g->partial;
  pthread_mutex_unlock(&growth_mu);
  lua_pushnil(L);
  lua_pushfstring(L, "%s %s needs %s but the workspace's growth cap is %s over the "
                  "%s%s it held at start, and %s of it is left; remove files you no longer "
                  "need (fs.remove) or write less", what, path,
                  n, cap, partial ? "at least " : "", base, left);
  lua_pushliteral(L, "quota");
  return 3;
}

/* Adds the bytes on disk under dirfd to *total, counting entries in *count; returns 1
** when it stopped at SCAN_MAX_ENTRIES, SCAN_MAX_DEPTH or the end time. Links are not
** followed. */
static int scan_dir (int dirfd, int depth, uint64_t *total, size_t *count, uint64_t end) {
  if (depth > SCAN_MAX_DEPTH) return 1;
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  DIR *d = fdopendir(fd);
  if (d == NULL) { close(fd); return 0; }
  int partial = 0;
  struct dirent *de;
  while (!partial && (de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (++*count > SCAN_MAX_ENTRIES || (*count % 64 == 0 && tp__now_ns() > end)) {
      partial = 1;
      break;
    }
    struct stat st;
    if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    *total += S_ISREG(st.st_mode) ? disk_bytes((uint64_t)st.st_size) : ENTRY_BYTES;
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(fd, de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        partial = scan_dir(sub, depth + 1, total, count, end);
        close(sub);
      }
    }
  }
  closedir(d);
  return partial;
}

/* Joins (or makes) the growth account of the directory fd is open on. NULL when out of
** memory or fd cannot be stat'ed. */
static growth *growth_join (int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return NULL;
  pthread_mutex_lock(&growth_mu);
  growth *g = growths;
  while (g && (g->dev != st.st_dev || g->ino != st.st_ino)) g = g->next;
  if (g) g->refs++;
  pthread_mutex_unlock(&growth_mu);
  if (g) return g;
  uint64_t total = 0;
  size_t count = 0;
  /* outside the lock: it takes a while */
  int partial = scan_dir(fd, 0, &total, &count, tp__now_ns() + SCAN_MAX_NS);
  pthread_mutex_lock(&growth_mu);
  g = growths;  /* another thread may have made it meanwhile */
  while (g && (g->dev != st.st_dev || g->ino != st.st_ino)) g = g->next;
  if (g) g->refs++;
  else if ((g = calloc(1, sizeof *g)) != NULL) {
    g->dev = st.st_dev;
    g->ino = st.st_ino;
    g->refs = 1;
    g->base = total;
    g->partial = partial;
    g->next = growths;
    growths = g;
  }
  pthread_mutex_unlock(&growth_mu);
  return g;
}

static void growth_leave (growth *g) {
  if (g == NULL) return;
  pthread_mutex_lock(&growth_mu);
  if (--g->refs == 0) {
    growth **pp = &growths;
    while (*pp != g) pp = &(*pp)->next;
    *pp = g->next;
    free(g);
  }
  pthread_mutex_unlock(&growth_mu);
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
  lua_Integer max_growth = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "walk");
    walk = lua_toboolean(L, -1);
    lua_getfield(L, 2, "max_growth");
    max_growth = luaL_optinteger(L, -1, 0);
    luaL_argcheck(L, max_growth >= 0, 2, "max_growth must be >= 0");
    lua_pop(L, 2);
  }
  workspace *w = lua_newuserdatauv(L, sizeof *w, 0);
  w->fd = -1;
  w->walk = walk;
  w->g = NULL;
  w->max_growth = (uint64_t)max_growth;
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
  w->g = growth_join(fd);
  if (w->g == NULL) {
    close(fd);
    w->fd = -1;
    return luaL_error(L, "not enough memory");
  }
  return 1;
}

static int ws_close (lua_State *L) {
  workspace *w = luaL_checkudata(L, 1, WS_META);
  if (w->fd >= 0) { close(w->fd); w->fd = -1; }
  growth_leave(w->g);
  w->g = NULL;
  return 0;
}

/* ws:growth() -> grown, max_growth, base, base_partial */
static int ws_growth (lua_State *L) {
  workspace *w = check_ws(L);
  pthread_mutex_lock(&growth_mu);
  lua_Integer grown = (lua_Integer)w->g->grown, base = (lua_Integer)w->g->base;
  int partial = w->g->partial;
  pthread_mutex_unlock(&growth_mu);
  lua_pushinteger(L, grown);
  lua_pushinteger(L, (lua_Integer)w->max_growth);
  lua_pushinteger(L, base);
  lua_pushboolean(L, partial);
  return 4;
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

/* ws:write(path, content [, left, quota]) -> bytes, charged
** Writes a temporary file in the target's directory and renames it over the target, so
** readers see the old content or the new, never a part. A symbolic link at the target
** is replaced, not written through. An existing file's permission bits are kept. Both
** budgets (see Quotas above) are checked before anything is written. */
static int ws_write (lua_State *L) {
  static atomic_uint counter;
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  size_t len;
  const char *data = luaL_checklstring(L, 3, &len);
  budget b = check_budget(L, 4);
  scope *s = scope_push(L);
  char name[NAME_MAX + 1], tmp[64];
  int rc = open_parent(w, path, &s->fd[0], name);
  if (rc < 0) return fail(L, rc == -E_NOTNAME ? EISDIR : -rc, path);
  int dir = s->fd[0];
  struct stat st;
  int keep_mode = -1;
  uint64_t old_bytes = 0;
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode)) return fail(L, EISDIR, path);
    if (S_ISREG(st.st_mode)) keep_mode = (int)(st.st_mode & 07777);
    old_bytes = S_ISREG(st.st_mode) ? disk_bytes((uint64_t)st.st_size) : ENTRY_BYTES;
  }
  uint64_t charge = len < ENTRY_BYTES ? ENTRY_BYTES : (uint64_t)len;
  if (b.left >= 0 && charge > (uint64_t)b.left)
    return fail_run_quota(L, &b, charge, "writing", path);
  int64_t delta = (int64_t)disk_bytes(len) - (int64_t)old_bytes;
  uint64_t room;
  if (growth_take(w, delta, &room) != 0)
    return fail_growth(L, w, (uint64_t)delta, room, "writing", path);
  int fd = -1;
  int e = 0;
  for (int i = 0; i < 16 && fd < 0; i++) {
    snprintf(tmp, sizeof tmp, ".tidepool-%ld-%u-%lx.tmp", (long)getpid(),
             atomic_fetch_add(&counter, 1), (unsigned long)(tp__now_ns() % TP_NS_PER_S));
    fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) { e = errno; break; }
  }
  if (fd < 0) {
    growth_take(w, -delta, NULL);
    return fail(L, e ? e : EEXIST, path);
  }
  s->fd[1] = fd;
  e = write_all(fd, data, len);
  if (e == 0 && keep_mode >= 0 && fchmod(fd, (mode_t)keep_mode) != 0) e = -errno;
  if (e == 0 && renameat(dir, tmp, dir, name) != 0) e = -errno;
  if (e != 0) {
    unlinkat(dir, tmp, 0);
    growth_take(w, -delta, NULL);
    return fail(L, -e, path);
  }
  lua_pushinteger(L, (lua_Integer)len);
  lua_pushinteger(L, (lua_Integer)charge);
  return 2;
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
  struct stat st;
  uint64_t gone = ENTRY_BYTES;
  if (fstatat(s->fd[0], name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
    gone = disk_bytes((uint64_t)st.st_size);
  if (unlinkat(s->fd[0], name, 0) != 0) {
    if (errno != EISDIR) return fail(L, errno, path);
    if (unlinkat(s->fd[0], name, AT_REMOVEDIR) != 0)
      return fail(L, errno == EEXIST ? ENOTEMPTY : errno, path);
  }
  growth_take(w, -(int64_t)gone, NULL);
  lua_pushboolean(L, 1);
  return 1;
}

/* Creates the directory path names (its parent must exist), paying ENTRY_BYTES of both
** budgets for it. 0, 1 when it existed (exist_ok), or -errno (-E_* for our own);
** -E_QUOTA_RUN / -E_QUOTA_GROWTH when a budget cannot pay (room: what was left). */
enum { E_QUOTA_RUN = 2000, E_QUOTA_GROWTH };
static int make_dir (workspace *w, const char *path, int exist_ok, budget *b,
                     uint64_t *room) {
  char name[NAME_MAX + 1];
  int dir = -1;
  int rc = open_parent(w, path, &dir, name);
  if (rc == -E_NOTNAME && exist_ok) return 1;   /* ".", "a/..": exists, if it resolved */
  if (rc < 0) return rc;
  struct stat st;
  if (exist_ok && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    rc = 1;
  else if (b->left >= 0 && b->spent + ENTRY_BYTES > b->left) rc = -E_QUOTA_RUN;
  else if (growth_take(w, ENTRY_BYTES, room) != 0) rc = -E_QUOTA_GROWTH;
  else if (mkdirat(dir, name, 0777) != 0) {
    rc = -errno;
    growth_take(w, -ENTRY_BYTES, NULL);
    if (rc == -EEXIST && exist_ok) {
      /* A directory, or a link to one that the rules let us follow. */
      int fd = ws_open(w, path, O_PATH | O_DIRECTORY, 0);
      if (fd < 0) rc = fd;
      else { close(fd); rc = 1; }
    }
  }
  else b->spent += ENTRY_BYTES;
  close(dir);
  return rc;
}

/* make_dir's failure as the Lua results. */
/* make_dir's failure as the Lua results, and a 4th: what the directories made before
** it cost (mkdir -p), for the caller's account. */
static int mkdir_fail (lua_State *L, workspace *w, int rc, const budget *b, uint64_t room,
                       const char *path, int exists_code) {
  if (rc == -E_QUOTA_RUN) fail_run_quota(L, b, ENTRY_BYTES, "making the directory", path);
  else if (rc == -E_QUOTA_GROWTH)
    fail_growth(L, w, ENTRY_BYTES, room, "making the directory", path);
  else fail(L, rc == -E_NOTNAME ? exists_code : -rc, path);
  lua_pushinteger(L, b->spent);
  return 4;
}

/* ws:mkdir(path [, parents [, left, quota]]) -> true, charged
** With parents, each missing ancestor is made in turn, every one resolved from the
** root again, and existing directories are fine (as mkdir -p). Each directory made is
** charged ENTRY_BYTES to both budgets. */
static int ws_mkdir (lua_State *L) {
  workspace *w = check_ws(L);
  const char *path = check_path(L, 2);
  int parents = lua_toboolean(L, 3);
  budget b = check_budget(L, 4);
  uint64_t room = 0;
  if (!parents) {
    int rc = make_dir(w, path, 0, &b, &room);
    if (rc < 0) return mkdir_fail(L, w, rc, &b, room, path, EEXIST);
    lua_pushboolean(L, 1);
    lua_pushinteger(L, b.spent);
    return 2;
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
    int rc = make_dir(w, buf, 1, &b, &room);
    buf[i] = c;
    if (rc < 0) return mkdir_fail(L, w, rc, &b, room, path, EEXIST);
  }
  if (path[0] == '/') return fail(L, EXDEV, path);   /* "/" alone made nothing */
  lua_pushboolean(L, 1);
  lua_pushinteger(L, b.spent);
  return 2;
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
  {"remove", ws_remove}, {"mkdir", ws_mkdir}, {"growth", ws_growth}, {"close", ws_close},
  {NULL, NULL}
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
