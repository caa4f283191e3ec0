/*
** confine_cgroup.h: where tidepool-confine makes a command's pids group on cgroup v2, and
** how it readies a subtree systemd delegated (Delegate= in packaging/tidepool.service).
** Included by tidepool-confine.c and by spec/c/test_confine_cgroup.c, which drives it on
** a fake cgroup root (a plain directory): every path starts at the root it is given.
**
** cgroup v2 makes a group only under a parent whose cgroup.subtree_control holds "pids",
** and a group other than the root that hands controllers to its children holds no
** process itself. A service's cgroup (/system.slice/tidepool.service) is systemd's: the
** engine may not enable controllers there unless the unit delegates it (Delegate=pids).
** Then systemd marks that group with the xattr trusted.delegate=1 (user.delegate=1 too on
** newer systemd) and, for a service with a User= or DynamicUser=, gives the user its
** files. So, for the engine's cgroup REL under ROOT:
**   1. REL hands "pids" to its children already (the root cgroup, a container, a shell
**      in a pids-enabled group): the group goes under REL, as before;
**   2. else the nearest of REL and its ancestors that was delegated to us, D: its
**      processes (the engine, this helper, any other) move to D/tidepool-main, a leaf,
**      "+pids" goes into D's cgroup.subtree_control, and the group goes under D;
**   3. else none: the caller falls back (RLIMIT_NPROC for a user; root: a warning).
*/
#ifndef tidepool_confine_cgroup_h
#define tidepool_confine_cgroup_h

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define CG_MAIN "tidepool-main"

/* 1 when the file DIR/NAME holds WORD as one of its space-separated words. */
static int cg_file_has_word (const char *dir, const char *name, const char *word) {
  char file[PATH_MAX + 32], buf[512];
  if ((size_t)snprintf(file, sizeof file, "%s/%s", dir, name) >= sizeof file) return 0;
  FILE *f = fopen(file, "re");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  size_t wl = strlen(word);
  for (char *p = buf; (p = strstr(p, word)) != NULL; p += wl)
    if ((p == buf || p[-1] == ' ') && (p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n'))
      return 1;
  return 0;
}

/* 1 when systemd delegated the group DIR: its xattr trusted.delegate (readable by root
** only) or user.delegate is "1"; or, for a user other than root, DIR is that user's (systemd
** hands a delegated group to the service's User=). */
static int cg_delegated (const char *dir, uid_t euid) {
  static const char *const names[] = { "trusted.delegate", "user.delegate" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char v[8];
    ssize_t n = getxattr(dir, names[i], v, sizeof v);
    if (n >= 1 && v[0] == '1') return 1;
  }
  struct stat st;
  return euid != 0 && stat(dir, &st) == 0 && st.st_uid == euid;
}

/* The directory under ROOT where the command's group goes, for the engine's cgroup REL
** ("" for the root group), in base. Returns 0: none; 1: REL (it hands "pids" to its
** children); 2: a delegated group (cg_ready_delegated must run first). */
static int cg_pick_base (const char *root, const char *rel, uid_t euid, char *base,
                         size_t size) {
  char dir[PATH_MAX];
  if ((size_t)snprintf(dir, sizeof dir, "%s%s", root, rel) >= sizeof dir) return 0;
  if (cg_file_has_word(dir, "cgroup.subtree_control", "pids")) {
    return (size_t)snprintf(base, size, "%s", dir) < size;
  }
  size_t rootlen = strlen(root);
  for (;;) {
    /* "pids" must reach D (enabled by its parent: Delegate=pids does it) */
    if (strlen(dir) > rootlen && cg_delegated(dir, euid) &&
        cg_file_has_word(dir, "cgroup.controllers", "pids"))
      return (size_t)snprintf(base, size, "%s", dir) < size ? 2 : 0;
    char *slash = strrchr(dir + rootlen, '/');
    if (slash == NULL) return 0;
    *slash = '\0';
  }
}

/* Moves every process listed in D/cgroup.procs to D/tidepool-main. Returns how many it
** moved, -1 on a failure. */
static int cg_move_out (const char *d) {
  char file[PATH_MAX + 32], to[PATH_MAX + 48], line[32];
  snprintf(file, sizeof file, "%s/cgroup.procs", d);
  snprintf(to, sizeof to, "%s/" CG_MAIN, d);
  if (mkdir(to, 0755) != 0 && errno != EEXIST) return -1;
  snprintf(to, sizeof to, "%s/" CG_MAIN "/cgroup.procs", d);
  FILE *f = fopen(file, "re");
  if (f == NULL) return -1;
  int moved = 0;
  while (fgets(line, sizeof line, f)) {
    size_t n = strcspn(line, "\n");
    if (n == 0) continue;
    /* (O_CREAT: the kernel made the file with the group; a fake root has to make it) */
    int fd = open(to, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) { fclose(f); return -1; }
    /* a process gone meanwhile (ESRCH) is no failure */
    if (write(fd, line, n) == (ssize_t)n || errno == ESRCH) moved++;
    close(fd);
  }
  fclose(f);
  return moved;
}

/* Readies the delegated group D for groups of its own: "pids" in its subtree_control,
** after moving its processes to D/tidepool-main (the kernel refuses, EBUSY, while D holds
** one; a process started meanwhile lands in D, hence the retries). Once done (the engine
** then runs in D/tidepool-main, and so do the helpers it starts next), nothing is moved
** again. Returns 1 when D hands "pids" to its children. */
static int cg_ready_delegated (const char *d) {
  char file[PATH_MAX + 32];
  if (cg_file_has_word(d, "cgroup.subtree_control", "pids")) return 1;
  snprintf(file, sizeof file, "%s/cgroup.subtree_control", d);
  for (int tries = 0; tries < 20; tries++) {
    if (cg_move_out(d) < 0) return 0;
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int ok = write(fd, "+pids", 5) == 5;
    int err = errno;
    close(fd);
    if (ok) return 1;
    if (err != EBUSY) return 0;
  }
  return 0;
}

#endif
