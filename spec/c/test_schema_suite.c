/*
** test_schema_suite.c: runs the official JSON Schema Test Suite (tests/draft2020-12 and
** tests/draft7, not their optional/ folders) through the validator, formats as
** annotations, remotes from the suite's remotes/ folder. The suite is read from
** $TP_SCHEMA_SUITE, else ../shared/json-schema-test-suite (relative to the repository
** root, where tests run). Every failing case must be listed in
** spec/schema-suite-failures.txt ("dialect<TAB>file<TAB>case<TAB>test<TAB>reason"), and a
** listed case that now passes is an error too, so the list stays honest.
** TP_SCHEMA_SUITE_WRITE=path writes the current failures in that format.
*/
#include <dirent.h>
#include <stdlib.h>

#include "schema.h"
#include "tp_test.h"

#define FAILURES_FILE "spec/schema-suite-failures.txt"

typedef struct { char **v; size_t n, cap; } strlist;

static void sl_add (strlist *l, const char *s) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    if (!l->v) abort();
  }
  l->v[l->n++] = strdup(s);
}

static void sl_free (strlist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int str_cmp (const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *suite_dir (void) {
  const char *d = getenv("TP_SCHEMA_SUITE");
  return d && *d ? d : "../shared/json-schema-test-suite";
}

/* tabs and newlines would break the list's format */
static void flatten (char *s) {
  for (; *s; s++)
    if (*s == '\t' || *s == '\n' || *s == '\r') *s = ' ';
}

/* the listed failures' keys (first four fields), with their whole lines */
static strlist listed_keys, listed_lines;
static FILE *write_out;

static void load_listed (void) {
  FILE *f = fopen(FAILURES_FILE, "r");
  if (!f) return;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0] || line[0] == '#') continue;
    char key[4096];
    snprintf(key, sizeof key, "%s", line);
    char *p = key;
    for (int tabs = 0; *p; p++)
      if (*p == '\t' && ++tabs == 4) { *p = 0; break; }
    sl_add(&listed_keys, key);
    sl_add(&listed_lines, line);
  }
  fclose(f);
}

static int listed_index (const char *key) {
  for (size_t i = 0; i < listed_keys.n; i++)
    if (strcmp(listed_keys.v[i], key) == 0) return (int)i;
  return -1;
}

typedef struct { int total, passed, unlisted; unsigned char *seen; } tally;

static void record (tally *t, const char *dialect, const char *file, const char *cdesc,
                    const char *tdesc, int pass, const char *reason) {
  char key[4096], c[1024], d[1024];
  snprintf(c, sizeof c, "%s", cdesc);
  snprintf(d, sizeof d, "%s", tdesc);
  flatten(c);
  flatten(d);
  snprintf(key, sizeof key, "%s\t%s\t%s\t%s", dialect, file, c, d);
  int li = listed_index(key);
  t->total++;
  if (pass) {
    t->passed++;
    if (li >= 0) printf("#   listed failure now passes (remove it from %s): %s\n", FAILURES_FILE, key);
    return;
  }
  if (li >= 0) t->seen[li] = 1;
  else {
    t->unlisted++;
    printf("#   unlisted failure: %s\t%s\n", key, reason);
  }
  if (write_out) fprintf(write_out, "%s\t%s\n", key, reason);
}

static void run_file (tally *t, const char *dialect, tp_dialect dd, const char *dir,
                      const char *file, const char *remotes) {
  char path[2048], err[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  json_error_t je;
  json_t *doc = json_load_file(path, JSON_ALLOW_NUL, &je);
  if (!json_is_array(doc)) {
    printf("#   cannot read %s: %s\n", path, je.text);
    t->total++;
    t->unlisted++;
    json_decref(doc);
    return;
  }
  size_t ci;
  json_t *cs;
  json_array_foreach(doc, ci, cs) {
    const char *cdesc = json_string_value(json_object_get(cs, "description"));
    json_t *tests = json_object_get(cs, "tests");
    tp_schema *s = tp__schema_compile(json_object_get(cs, "schema"), dd, remotes, 0, err, sizeof err);
    size_t ti;
    json_t *tc;
    json_array_foreach(tests, ti, tc) {
      const char *tdesc = json_string_value(json_object_get(tc, "description"));
      int want = json_is_true(json_object_get(tc, "valid"));
      char reason[700];
      int pass = 0;
      if (!s) {
        snprintf(reason, sizeof reason, "schema does not compile: %s", err);
      } else {
        json_t *data = json_object_get(tc, "data");
        tp_schema_errors errs = {0};
        int fast = tp__schema_validate(s, data, NULL);
        int full = tp__schema_validate(s, data, &errs);
        if (fast != full) {
          snprintf(reason, sizeof reason, "fast and error-collecting validation disagree (%d vs %d)", fast, full);
        } else if (full == 0 && errs.count == 0) {
          snprintf(reason, sizeof reason, "invalid without any error reported");
        } else if (full < 0) {
          snprintf(reason, sizeof reason, "internal failure");
        } else if (full != want) {
          if (want) snprintf(reason, sizeof reason, "expected valid, got invalid: %s at %s: %s",
                             errs.items[0].keyword, errs.items[0].path, errs.items[0].message);
          else snprintf(reason, sizeof reason, "expected invalid, got valid");
        } else {
          pass = 1;
        }
        flatten(reason);
        tp__schema_errors_clear(&errs);
      }
      record(t, dialect, file, cdesc ? cdesc : "", tdesc ? tdesc : "", pass, reason);
    }
    tp__schema_free(s);
  }
  json_decref(doc);
}

static void run_dialect (const char *dialect, tp_dialect dd) {
  char dir[1024], remotes[1024];
  snprintf(dir, sizeof dir, "%s/tests/%s", suite_dir(), dialect);
  snprintf(remotes, sizeof remotes, "%s/remotes", suite_dir());
  DIR *dh = opendir(dir);
  if (!dh) {
    TP_FAIL_AT("the JSON Schema Test Suite is missing: cannot open %s "
               "(set TP_SCHEMA_SUITE to the suite's directory)", dir);
    return;
  }
  strlist files = {0};
  struct dirent *de;
  while ((de = readdir(dh))) {
    size_t l = strlen(de->d_name);
    if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0) sl_add(&files, de->d_name);
  }
  closedir(dh);
  qsort(files.v, files.n, sizeof *files.v, str_cmp);
  tally t = {0, 0, 0, calloc(listed_keys.n + 1, 1)};
  for (size_t i = 0; i < files.n; i++) run_file(&t, dialect, dd, dir, files.v[i], remotes);
  double pct = t.total ? 100.0 * t.passed / t.total : 0;
  printf("schema_suite %s: %d/%d passed (%.1f%%)\n", dialect, t.passed, t.total, pct);
  CHECK(t.total > 0);
  CHECK(pct >= 98.0);
  CHECK_INT(t.unlisted, 0);
  /* listed for this dialect but neither failing now: stale */
  size_t dl = strlen(dialect);
  int stale = 0;
  for (size_t i = 0; i < listed_keys.n; i++) {
    if (strncmp(listed_keys.v[i], dialect, dl) != 0 || listed_keys.v[i][dl] != '\t') continue;
    if (!t.seen[i]) { stale++; printf("#   listed but not failing: %s\n", listed_lines.v[i]); }
  }
  CHECK_INT(stale, 0);
  free(t.seen);
  sl_free(&files);
}

TEST(suite_draft2020_12_passes_and_failures_are_listed) { run_dialect("draft2020-12", TP_DIALECT_2020_12); }
TEST(suite_draft7_passes_and_failures_are_listed) { run_dialect("draft7", TP_DIALECT_DRAFT7); }

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  const char *w = getenv("TP_SCHEMA_SUITE_WRITE");
  if (w && *w) write_out = fopen(w, "w");
  load_listed();
  RUN(suite_draft2020_12_passes_and_failures_are_listed);
  RUN(suite_draft7_passes_and_failures_are_listed);
  if (write_out) fclose(write_out);
  sl_free(&listed_keys);
  sl_free(&listed_lines);
  return tp_test_end();
}
