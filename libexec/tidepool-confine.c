/*
** tidepool-confine: confines itself, then execve's a command. proc.run (tools/proc.lua)
** spawns it through libuv (uv_spawn), so the engine never forks by hand: libuv owns the
** fork, the pipes and SIGCHLD, which keeps an embedder's loop and signal handling intact,
** and everything that must happen between fork and exec happens here, in a fresh
** single-threaded process where any function may be called.
**
**   tidepool-confine [options] -- /absolute/program argv0 [arg ...]
**     --rw DIR      a directory the command may read and write (repeatable)
**     --ro DIR      a directory the command may read and execute (repeatable), beside
**                   the system ones (SYSTEM_RO below)
**     --net         leave networking alone (default: no sockets, no TCP)
**     --cpu S       RLIMIT_CPU, seconds (SIGXCPU at S, SIGKILL at S + 1)
**     --as BYTES    RLIMIT_AS      --fsize BYTES  RLIMIT_FSIZE
**     --nofile N    RLIMIT_NOFILE  --nproc N      processes the command may have at once
**
** What it does, in order: setsid (its own session and process group); a pids cgroup
** (see pids_cgroup and confine_cgroup.h); rlimits, RLIMIT_CORE 0; for root, drops every capability;
** PR_SET_NO_NEW_PRIVS; a Landlock ruleset when the kernel has Landlock; a seccomp filter
** (libseccomp). A protection the kernel offers and that fails to apply is fatal (exit
** 126, nothing runs); one the kernel lacks is reported as missing.
**
** It reports on descriptor 3 (a pipe the parent reads to its end; close-on-exec, so it
** ends at the exec), one line of key=value words:
**   landlock=ABI|0 seccomp=1|0 nproc=cgroup|rlimit|0 [cgroup=PATH]
** followed, when execve fails, by "exec=ENOENT" (or another errno name) and exit 127, or
** on a set-up failure by "error=what:errno" and exit 126.
*/
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <seccomp.h>

#include "confine_cgroup.h"

#define REPORT_FD 3
#define MAX_DIRS 32

/* ---- Landlock (our own declarations: the system's header may predate ABI 4-6) ---------- */

#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE      (1ULL << 0)
#define LL_FS_WRITE_FILE   (1ULL << 1)
#define LL_FS_READ_FILE    (1ULL << 2)
#define LL_FS_READ_DIR     (1ULL << 3)
#define LL_FS_REFER        (1ULL << 13)  /* ABI 2 */
#define LL_FS_TRUNCATE     (1ULL << 14)  /* ABI 3 */
#define LL_FS_IOCTL_DEV    (1ULL << 15)  /* ABI 5 */
#define LL_NET_BIND_TCP    (1ULL << 0)   /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ULL << 0)  /* ABI 6 */
#define LL_SCOPE_SIGNAL        (1ULL << 1)

struct ll_ruleset_attr { uint64_t fs, net, scoped; };
struct ll_path_beneath { uint64_t allowed; int32_t fd; } __attribute__((packed));

/* Read and execute only. /proc is there for programs that read /proc/self; Landlock keeps
** the command from ptrace-reading processes outside its domain (other processes'
** environ, mem). /dev is not: for a command run by root it would hold the disks. */
static const char *const SYSTEM_RO[] = {
  "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
  "/proc", NULL };
/* The device files it may read and write: no disk, terminal or shared memory. */
static const char *const DEV_RW[] = {
  "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", NULL };

static const char *ro_dirs[MAX_DIRS], *rw_dirs[MAX_DIRS];
static int n_ro, n_rw;
static char report[1024];

static void say (const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say (const char *fmt, ...) {
  size_t len = strlen(report);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(report + len, sizeof report - len, fmt, ap);
  va_end(ap);
}

static void flush_report (void) {
  size_t len = strlen(report), off = 0;
  while (off < len) {
    ssize_t n = write(REPORT_FD, report + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += (size_t)n;
  }
  report[0] = '\0';
}

static void fatal (const char *what, int err) {
  say(" error=%s:%d\n", what, err);
  flush_report();
  _exit(126);
}

static int ll_abi (void) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : (int)abi;
}

/* Adds a rule for path; a path that does not exist is skipped. Rights a file cannot
** have (READ_DIR, EXECUTE on a device...) are dropped for non-directories. */
static void ll_allow (int rs, const char *path, uint64_t rights, uint64_t handled) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
    rights &= LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE |
              LL_FS_IOCTL_DEV;
  struct ll_path_beneath pb = { rights & handled, fd };
  long rc = syscall(SYS_landlock_add_rule, rs, LL_RULE_PATH_BENEATH, &pb, 0);
  int err = errno;
  close(fd);
  if (rc != 0) fatal("landlock_add_rule", err);
}

static int apply_landlock (int net) {
  int abi = ll_abi();
  if (abi <= 0) return 0;
  struct ll_ruleset_attr attr = { 0, 0, 0 };
  attr.fs = (1ULL << 13) - 1;          /* ABI 1: EXECUTE .. MAKE_SYM */
  if (abi >= 2) attr.fs |= LL_FS_REFER;
  if (abi >= 3) attr.fs |= LL_FS_TRUNCATE;
  if (abi >= 5) attr.fs |= LL_FS_IOCTL_DEV;
  size_t size = sizeof(uint64_t);
  if (abi >= 4) {
    size = 2 * sizeof(uint64_t);
    if (!net) attr.net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;  /* handled, no rule: denied */
  }
  if (abi >= 6) {
    size = sizeof attr;
    attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
  }
  int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (rs < 0) fatal("landlock_create_ruleset", errno);
  const uint64_t ro = LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_READ_DIR;
  for (int i = 0; SYSTEM_RO[i]; i++) ll_allow(rs, SYSTEM_RO[i], ro, attr.fs);
  for (int i = 0; i < n_ro; i++) ll_allow(rs, ro_dirs[i], ro, attr.fs);
  for (int i = 0; DEV_RW[i]; i++)
    ll_allow(rs, DEV_RW[i], LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_TRUNCATE |
             LL_FS_IOCTL_DEV, attr.fs);
  for (int i = 0; i < n_rw; i++) ll_allow(rs, rw_dirs[i], attr.fs, attr.fs);
  if (syscall(SYS_landlock_restrict_self, rs, 0) != 0) fatal("landlock_restrict_self", errno);
  close(rs);
  return abi;
}

/* ---- seccomp ------------------------------------------------------------------------- */

/* Denied with EPERM, each for what it would let the command reach beyond its confinement.
** A name this libseccomp or architecture does not know is skipped. */
static const char *const DENIED[] = {
  /* other processes' memory and execution */
  "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
  /* mounts and namespaces: a new view of the file system */
  "mount", "umount", "umount2", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
  "fspick", "mount_setattr", "pivot_root", "chroot", "unshare", "setns",
  /* leaving the process group that the timeout kills */
  "setsid", "setpgid",
  /* the kernel itself: modules, BPF, keys, perf, userfaultfd, kexec, swap, reboot */
  "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "bpf",
  "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "swapon",
  "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog", "lookup_dcookie",
  "open_by_handle_at", "name_to_handle_at", "fanotify_init", "iopl", "ioperm", "vhangup",
  /* the clock and the machine's names */
  "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
  "setdomainname",
  /* io_uring performs socket and file operations this filter would not see */
  "io_uring_setup", "io_uring_enter", "io_uring_register",
  NULL };

/* Namespace flags of clone(2): a new namespace is refused like unshare. */
static const uint64_t CLONE_NS[] = { CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET,
  CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP, 0x00000080 /* CLONE_NEWTIME */ };

static int apply_seccomp (int net) {
  scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
  if (f == NULL) fatal("seccomp_init", ENOMEM);
  int rc = 0;
  for (int i = 0; DENIED[i] && rc == 0; i++) {
    int nr = seccomp_syscall_resolve_name(DENIED[i]);
    if (nr == __NR_SCMP_ERROR) continue;
    rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), nr, 0);
  }
  for (size_t i = 0; i < sizeof CLONE_NS / sizeof *CLONE_NS && rc == 0; i++)
    rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NS[i], CLONE_NS[i]));
  /* clone3 passes its flags in memory, which a filter cannot read: ENOSYS makes libc
  ** fall back to clone, whose flags are checked above. */
  if (rc == 0) rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  /* typing into a terminal's input queue */
  if (rc == 0) rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
  /* without "net": no socket of any family (TCP, UDP, and Unix sockets such as an agent's
  ** or a daemon's); socketpair still works */
  if (!net && rc == 0) rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 0);
  if (rc == 0) rc = seccomp_load(f);
  seccomp_release(f);
  if (rc != 0) fatal("seccomp", -rc);
  return 1;
}

/* ---- processes ----------------------------------------------------------------------- */

/* Removes the groups under base whose command is gone ("tidepool-ENGINE-PID", ENGINE or
** PID, the command's own, no longer running): an engine removes its commands' groups
** itself, but not when it exits (or dies) while one runs, nor the groups it cannot see
** (made under a mount of our own, see private_hierarchy). A group still holding a process
** stays (the kernel refuses); one whose command is starting is not touched (PID alive). */
static void sweep_cgroups (const char *base) {
  DIR *d = opendir(base);
  if (d == NULL) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    long engine, pid;
    char tail;
    if (sscanf(de->d_name, "tidepool-%ld-%ld%c", &engine, &pid, &tail) != 2 || engine <= 0 ||
        pid <= 0)
      continue;
    int engine_gone = kill((pid_t)engine, 0) != 0 && errno == ESRCH;
    int pid_gone = kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    if (!engine_gone && !pid_gone) continue;
    unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

/* Makes every mount this process sees private (its mounts and unmounts reach no other
** namespace): "/" recursively, or, in a chroot, where "/" is no mount point (EINVAL),
** each mount point that /proc/self/mountinfo shows, field 5, relative to the root. */
static void make_private (void) {
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) return;
  FILE *f = fopen("/proc/self/mountinfo", "r");
  if (f == NULL) return;
  char line[4096], mp[PATH_MAX];
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strchr(mp, '\\') == NULL)
      mount(NULL, mp, NULL, MS_REC | MS_PRIVATE, NULL);  /* (octal escapes: left alone) */
  fclose(f);
}

/* Where no hierarchy holding "pids" is mounted (a chroot whose /sys is a bare sysfs, a
** root made by mmdebstrap or debootstrap, a container without /sys/fs/cgroup), root can
** still mount one: in a mount namespace of this process's own (unshare(CLONE_NEWNS),
** its mounts made private, so nothing changes for anyone else), on /sys/fs/cgroup (or a
** fresh directory under /tmp where there is none). v1: the "pids" hierarchy; v2:
** cgroup2. Returns 1 with the mount point in mnt; the caller detaches it once the process
** has joined its group (a group outlives the mount). Needs CAP_SYS_ADMIN: without it (an
** unprivileged container) returns 0. */
static int private_hierarchy (int v1, char *mnt, size_t size, int *made_dir) {
  struct stat st;
  if (unshare(CLONE_NEWNS) != 0) return 0;
  make_private();
  *made_dir = 0;
  if (stat("/sys/fs/cgroup", &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(mnt, size, "/sys/fs/cgroup");
  } else {
    if ((size_t)snprintf(mnt, size, "/tmp/tidepool-cgroup-XXXXXX") >= size || !mkdtemp(mnt))
      return 0;
    *made_dir = 1;
  }
  if (mount(v1 ? "cgroup" : "cgroup2", mnt, v1 ? "cgroup" : "cgroup2",
            MS_NOSUID | MS_NODEV | MS_NOEXEC, v1 ? "pids" : NULL) != 0) {
    if (*made_dir) rmdir(mnt);
    return 0;
  }
  return 1;
}

/* Root is exempt from RLIMIT_NPROC (the kernel never applies it to uid 0, user namespace
** or not), so for root the count of processes is held by a pids cgroup: a new group under
** the pids hierarchy (cgroup v2: under our own cgroup, when "pids" is enabled for its
** children; v1: the pids controller's mount), pids.max = nproc, joined before exec. When
** that hierarchy is not mounted here, on a mount of our own (private_hierarchy). Its
** path goes into the report when the parent can reach it (it removes the group once the
** command is gone); a group on our own mount is left to sweep_cgroups. Returns 1 when
** the command runs in one. */
static int pids_cgroup (long nproc, char *path, size_t size) {
  int root = geteuid() == 0;
  char rel[PATH_MAX] = "", base[PATH_MAX] = "", mnt[64] = "";
  int v1 = 0, v2 = 0, made_dir = 0;
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f == NULL) return 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c2 == NULL) continue;
    *c1 = *c2 = '\0';
    const char *ctl = c1 + 1, *r = c2 + 1;
    if (strcmp(r, "/") == 0) r = "";
    if (strcmp(ctl, "pids") == 0 || strstr(ctl, "pids") != NULL) {
      snprintf(rel, sizeof rel, "%s", r);
      v1 = 1;
      break;
    }
    if (*ctl == '\0') {
      snprintf(rel, sizeof rel, "%s", r);
      v2 = 1;
    }
  }
  fclose(f);
  if (!v1 && !v2) return 0;
  snprintf(base, sizeof base, v1 ? "/sys/fs/cgroup/pids%s" : "/sys/fs/cgroup%s", rel);
  if (access(v1 ? "/sys/fs/cgroup/pids/cgroup.procs" : "/sys/fs/cgroup/cgroup.controllers",
             F_OK) != 0) {
    if (!root || !private_hierarchy(v1, mnt, sizeof mnt, &made_dir)) return 0;
    snprintf(base, sizeof base, "%s%s", mnt, rel);
  } else if (v2) {
    /* the engine's group, or the subtree systemd delegated (confine_cgroup.h); a user
    ** other than root uses only the latter */
    int how = cg_pick_base("/sys/fs/cgroup", rel, geteuid(), base, sizeof base);
    if (how == 0 || (how == 1 && !root) || (how == 2 && !cg_ready_delegated(base)))
      return 0;
  } else if (!root) {
    return 0;
  }
  sweep_cgroups(base);
  int ok = 0;
  int len = snprintf(path, size, "%s/tidepool-%ld-%ld", base, (long)getppid(),
                     (long)getpid());
  if (len >= 0 && (size_t)len + 16 <= size && mkdir(path, 0755) == 0) {
    char file[PATH_MAX + 16];
    char num[32];
    snprintf(file, sizeof file, "%s/pids.max", path);
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      int n = snprintf(num, sizeof num, "%ld", nproc);
      ok = write(fd, num, (size_t)n) == n;
      close(fd);
    }
    if (ok) {
      snprintf(file, sizeof file, "%s/cgroup.procs", path);
      fd = open(file, O_WRONLY | O_CLOEXEC);
      ok = 0;
      if (fd >= 0) {
        ok = write(fd, "0", 1) == 1;
        close(fd);
      }
    }
    if (!ok) rmdir(path);
  }
  if (!ok || mnt[0] != '\0') path[0] = '\0';
  if (mnt[0] != '\0') {
    umount2(mnt, MNT_DETACH);
    if (made_dir) rmdir(mnt);
  }
  return ok;
}

/* The tasks (threads) of this user now: RLIMIT_NPROC counts them all, not only ours, so
** the limit is set that much above what the command may add. Each process's count of
** threads is field 20 of /proc/PID/stat. */
static long user_tasks (void) {
  DIR *d = opendir("/proc");
  if (d == NULL) return -1;
  long n = 0;
  uid_t uid = getuid();
  struct dirent *de;
  char path[64], buf[1024];
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, 0) != 0 || st.st_uid != uid) continue;
    long threads = 1;
    snprintf(path, sizeof path, "%.20s/stat", de->d_name);
    int fd = openat(dirfd(d), path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t len = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (len > 0) {
        buf[len] = '\0';
        char *p = strrchr(buf, ')');  /* after the command's name, which may hold spaces */
        for (int field = 2; p != NULL && field < 20; field++) p = strchr(p + 1, ' ');
        if (p != NULL && atol(p + 1) > 0) threads = atol(p + 1);
      }
    }
    n += threads;
  }
  closedir(d);
  return n;
}

static void set_limit (int res, rlim_t soft, rlim_t hard, const char *name) {
  struct rlimit cur, rl = { soft, hard };
  if (getrlimit(res, &cur) == 0 && cur.rlim_max != RLIM_INFINITY) {
    if (rl.rlim_max > cur.rlim_max) rl.rlim_max = cur.rlim_max;
    if (rl.rlim_cur > rl.rlim_max) rl.rlim_cur = rl.rlim_max;
  }
  if (setrlimit(res, &rl) != 0) fatal(name, errno);
}

static void drop_capabilities (void) {
  for (int c = 0; c < 64; c++)
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno == EINVAL) break;
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof d);
  if (syscall(SYS_capset, &h, d) != 0) fatal("capset", errno);
}

static long num_arg (const char *s, const char *opt) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < 0 || v > LONG_MAX) {
    fprintf(stderr, "tidepool-confine: %s expects a number >= 0, got '%s'\n", opt, s);
    exit(126);
  }
  return (long)v;
}

int main (int argc, char **argv) {
  int net = 0, i;
  long cpu = -1, as = -1, fsize = -1, nofile = 256, nproc = 64;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) { i++; break; }
    if (strcmp(a, "--net") == 0) { net = 1; continue; }
    if (i + 1 >= argc) break;
    const char *v = argv[++i];
    if (strcmp(a, "--rw") == 0 && n_rw < MAX_DIRS) rw_dirs[n_rw++] = v;
    else if (strcmp(a, "--ro") == 0 && n_ro < MAX_DIRS) ro_dirs[n_ro++] = v;
    else if (strcmp(a, "--cpu") == 0) cpu = num_arg(v, a);
    else if (strcmp(a, "--as") == 0) as = num_arg(v, a);
    else if (strcmp(a, "--fsize") == 0) fsize = num_arg(v, a);
    else if (strcmp(a, "--nofile") == 0) nofile = num_arg(v, a);
    else if (strcmp(a, "--nproc") == 0) nproc = num_arg(v, a);
    else { i = argc; break; }
  }
  if (i + 1 >= argc || argv[i][0] != '/') {
    fprintf(stderr, "usage: tidepool-confine [--rw DIR] [--ro DIR] [--net] [--cpu S] "
            "[--as BYTES] [--fsize BYTES] [--nofile N] [--nproc N] -- /program argv0 [arg ...]\n");
    return 126;
  }
  if (fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC) != 0) {
    /* no report pipe: write the report to /dev/null rather than to a stray descriptor */
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0 && fd != REPORT_FD) { dup2(fd, REPORT_FD); close(fd); }
    fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC);
  }
  /* Every descriptor above the report's is closed: the command gets stdin, stdout,
  ** stderr and nothing of the engine's. */
  for (int fd = REPORT_FD + 1; fd < 1024; fd++) close(fd);

  setsid();  /* fails only when already a group leader (libuv's detached spawn did it) */

  char cg[PATH_MAX] = "";
  const char *nproc_how = "0";
  if (pids_cgroup(nproc, cg, sizeof cg)) {  /* a user: in a delegated subtree only */
    nproc_how = "cgroup";
    /* first: the parent removes it even after a failure */
    if (cg[0] != '\0') say("cgroup=%s ", cg);
  } else if (geteuid() != 0) {
    long have = user_tasks();
    if (have >= 0) {
      set_limit(RLIMIT_NPROC, (rlim_t)(have + nproc), (rlim_t)(have + nproc), "RLIMIT_NPROC");
      nproc_how = "rlimit";
    }
  }
  set_limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
  if (cpu > 0) set_limit(RLIMIT_CPU, (rlim_t)cpu, (rlim_t)cpu + 1, "RLIMIT_CPU");
  if (as > 0) set_limit(RLIMIT_AS, (rlim_t)as, (rlim_t)as, "RLIMIT_AS");
  if (fsize > 0) set_limit(RLIMIT_FSIZE, (rlim_t)fsize, (rlim_t)fsize, "RLIMIT_FSIZE");
  if (nofile > 0) set_limit(RLIMIT_NOFILE, (rlim_t)nofile, (rlim_t)nofile, "RLIMIT_NOFILE");
  if (geteuid() == 0) drop_capabilities();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fatal("PR_SET_NO_NEW_PRIVS", errno);
  int abi = apply_landlock(net);
  int sc = apply_seccomp(net);
  say("landlock=%d seccomp=%d nproc=%s\n", abi, sc, nproc_how);
  flush_report();
  /* tidepool ignores SIGXFSZ (a full state store is one write's error, not its end) and
  ** an ignored signal stays ignored across execve: the command gets the default back, so
  ** that --fsize ends it as it would end any program. */
  signal(SIGXFSZ, SIG_DFL);
  execv(argv[i], argv + i + 1);
  int err = errno;
  const char *name = err == ENOENT ? "ENOENT" : err == EACCES ? "EACCES" :
                     err == ENOEXEC ? "ENOEXEC" : err == ENOTDIR ? "ENOTDIR" : "EIO";
  say("exec=%s\n", name);
  flush_report();
  return 127;
}
