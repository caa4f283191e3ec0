/*
** test_confine_cgroup.c: where tidepool-confine makes a command's pids group on cgroup v2
** (libexec/confine_cgroup.h), on a fake cgroup root: a directory under /tmp with the
** files the kernel would show (cgroup.controllers, cgroup.subtree_control, cgroup.procs)
** and systemd's delegation mark (the xattr user.delegate, or the directory's owner).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tp_test.h"
#include "../../libexec/confine_cgroup.h"

static char root[64];
static char svc[PATH_MAX];  /* root + /system.slice/tidepool.service */

static void put (const char *dir, const char *name, const char *text) {
  char file[PATH_MAX + 64];
  snprintf(file, sizeof file, "%s/%s", dir, name);
  FILE *f = fopen(file, "w");
  if (f == NULL) { perror(file); exit(1); }
  fputs(text, f);
  fclose(f);
}

static char *slurp (const char *dir, const char *name) {
  static char buf[256];
  char file[PATH_MAX + 64];
  snprintf(file, sizeof file, "%s/%s", dir, name);
  FILE *f = fopen(file, "r");
  if (f == NULL) return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* A fresh tree: the root hands "pids" to /system.slice, which hands it to the service;
** the service's group holds the engine (4242) and a helper (4243) and hands nothing on. */
static void fresh_tree (void) {
  char cmd[128], d[PATH_MAX];
  if (root[0] != '\0') {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) exit(1);
  }
  snprintf(root, sizeof root, "/tmp/tp-fake-cgroup-XXXXXX");
  if (mkdtemp(root) == NULL) { perror("mkdtemp"); exit(1); }
  put(root, "cgroup.controllers", "cpuset cpu io memory pids\n");
  put(root, "cgroup.subtree_control", "memory pids\n");
  snprintf(d, sizeof d, "%s/system.slice", root);
  mkdir(d, 0755);
  put(d, "cgroup.controllers", "memory pids\n");
  put(d, "cgroup.subtree_control", "memory pids\n");
  snprintf(svc, sizeof svc, "%s/system.slice/tidepool.service", root);
  mkdir(svc, 0755);
  put(svc, "cgroup.controllers", "memory pids\n");
  put(svc, "cgroup.subtree_control", "");
  put(svc, "cgroup.procs", "4242\n4243\n");
}

static void mark_delegated (const char *dir) {
  if (setxattr(dir, "user.delegate", "1", 1, 0) != 0) {
    perror("setxattr user.delegate");
    exit(1);
  }
}

TEST(a_group_that_hands_pids_to_its_children_is_used_as_it_is) {
  char base[PATH_MAX];
  fresh_tree();
  CHECK_INT(cg_pick_base(root, "", 0, base, sizeof base), 1);
  CHECK_STR(base, root);
  char want[PATH_MAX + 16];
  snprintf(want, sizeof want, "%s/system.slice", root);
  CHECK_INT(cg_pick_base(root, "/system.slice", 0, base, sizeof base), 1);
  CHECK_STR(base, want);
}

TEST(a_service_group_not_delegated_gives_none) {
  char base[PATH_MAX] = "";
  fresh_tree();
  /* its parent hands pids on, but it is systemd's: no group is made anywhere */
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 0, base, sizeof base), 0);
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 1000, base, sizeof base), 0);
}

TEST(a_delegated_service_group_is_readied_its_processes_moved_to_a_leaf) {
  char base[PATH_MAX], leaf[PATH_MAX + 32];
  fresh_tree();
  mark_delegated(svc);
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 0, base, sizeof base), 2);
  CHECK_STR(base, svc);
  CHECK_INT(cg_ready_delegated(base), 1);
  snprintf(leaf, sizeof leaf, "%s/" CG_MAIN, svc);
  struct stat st;
  CHECK(stat(leaf, &st) == 0 && S_ISDIR(st.st_mode));
  /* each PID written on its own (the fake file keeps the last one) */
  CHECK_STR(slurp(leaf, "cgroup.procs"), "4243");
  CHECK_STR(slurp(svc, "cgroup.subtree_control"), "+pids");
}

TEST(the_leaf_picks_its_delegated_parent) {
  char base[PATH_MAX], leaf[PATH_MAX + 32];
  fresh_tree();
  mark_delegated(svc);
  snprintf(leaf, sizeof leaf, "%s/" CG_MAIN, svc);
  mkdir(leaf, 0755);
  put(leaf, "cgroup.controllers", "pids\n");
  put(leaf, "cgroup.subtree_control", "");
  put(leaf, "cgroup.procs", "4242\n");
  put(svc, "cgroup.subtree_control", "pids\n");
  put(svc, "cgroup.procs", "");
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service/" CG_MAIN, 0, base,
                         sizeof base), 2);
  CHECK_STR(base, svc);
  CHECK_INT(cg_ready_delegated(base), 1);
  CHECK_STR(slurp(svc, "cgroup.subtree_control"), "pids\n");  /* untouched */
  CHECK_STR(slurp(leaf, "cgroup.procs"), "4242\n");            /* nothing moved */
}

TEST(delegated_without_the_pids_controller_gives_none) {
  char base[PATH_MAX];
  fresh_tree();
  mark_delegated(svc);
  put(svc, "cgroup.controllers", "memory\n");
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 0, base, sizeof base), 0);
}

TEST(for_a_user_the_group_systemd_gave_it_counts_as_delegated_not_for_root) {
  char base[PATH_MAX];
  fresh_tree();
  if (geteuid() != 0) {  /* chown needs root: said, not skipped silently */
    printf("# (chown needs root: the owner rule is checked by root runs only)\n");
    return;
  }
  CHECK(chown(svc, 12345, 12345) == 0);
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 12345, base, sizeof base), 2);
  CHECK_STR(base, svc);
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 54321, base, sizeof base), 0);
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 0, base, sizeof base), 0);
}

TEST(a_cgroup_procs_file_that_cannot_be_read_fails_the_readying) {
  char base[PATH_MAX], file[PATH_MAX + 32];
  fresh_tree();
  mark_delegated(svc);
  CHECK_INT(cg_pick_base(root, "/system.slice/tidepool.service", 0, base, sizeof base), 2);
  snprintf(file, sizeof file, "%s/cgroup.procs", svc);
  unlink(file);
  CHECK_INT(cg_ready_delegated(base), 0);
  CHECK_STR(slurp(svc, "cgroup.subtree_control"), "");
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(a_group_that_hands_pids_to_its_children_is_used_as_it_is);
  RUN(a_service_group_not_delegated_gives_none);
  RUN(a_delegated_service_group_is_readied_its_processes_moved_to_a_leaf);
  RUN(the_leaf_picks_its_delegated_parent);
  RUN(delegated_without_the_pids_controller_gives_none);
  RUN(for_a_user_the_group_systemd_gave_it_counts_as_delegated_not_for_root);
  RUN(a_cgroup_procs_file_that_cannot_be_read_fails_the_readying);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) return 1;
  return tp_test_end();
}
