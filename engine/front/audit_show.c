/*
** audit_show.c: `tidepool audit show FILE [RUN] [--json]`, reading the audit journal that
** `tidepool run --audit FILE` (tp_engine_audit_calls) writes. Without RUN: one line per
** run (its id, when it started, its calls, how it ended or "died"). With RUN (its id, or
** a unique prefix of it): each call, as made, failed, refused, held (waiting for a person
** when the record ends) or in flight (started, never ended: the process died). Lines of
** other shapes in the file (the MCP server's per-run audit lines) are skipped.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit_show.h"

#define LINE_MAX_ (64u << 10)

typedef struct call {
  long long seq, line;
  char tool[260], code[64], state[16];
  double ms;
} call;

typedef struct run {
  char id[17], started[32], code[64];
  int ended, ok;
  double ms;
  call *calls;
  size_t ncalls, cap;
} run;

static const char *const refusals[] = {
  "tool.denied", "tool.rate_limited", "tool.unknown", "tool.invalid_input",
  "limit.tool_calls", NULL
};

static int refused (const char *code) {
  for (int i = 0; refusals[i]; i++) if (strcmp(code, refusals[i]) == 0) return 1;
  return 0;
}

static run *find_run (run **runs, size_t *n, size_t *cap, const char *id, int make) {
  for (size_t i = 0; i < *n; i++) if (strcmp((*runs)[i].id, id) == 0) return &(*runs)[i];
  if (!make) return NULL;
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    run *nr = realloc(*runs, nc * sizeof *nr);
    if (nr == NULL) return NULL;
    *runs = nr;
    *cap = nc;
  }
  run *r = &(*runs)[(*n)++];
  memset(r, 0, sizeof *r);
  snprintf(r->id, sizeof r->id, "%s", id);
  return r;
}

static call *find_call (run *r, long long seq, int make) {
  for (size_t i = r->ncalls; i-- > 0;) if (r->calls[i].seq == seq) return &r->calls[i];
  if (!make) return NULL;
  if (r->ncalls == r->cap) {
    size_t nc = r->cap ? r->cap * 2 : 16;
    call *ncl = realloc(r->calls, nc * sizeof *ncl);
    if (ncl == NULL) return NULL;
    r->calls = ncl;
    r->cap = nc;
  }
  call *c = &r->calls[r->ncalls++];
  memset(c, 0, sizeof *c);
  c->seq = seq;
  return c;
}

static const char *str (json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "";
}

/* Reads the journal f into *runs (*nruns of them, in the order they started); 1 when out
** of memory (what was read is kept). */
static int load (FILE *f, run **runs_, size_t *nruns_, size_t *cap_) {
  run *runs = *runs_;
  size_t nruns = *nruns_, cap = *cap_;
  char *line = malloc(LINE_MAX_);
  int oom = line == NULL;
  while (!oom && fgets(line, LINE_MAX_, f)) {
    json_t *o = json_loads(line, 0, NULL);
    const char *ev = str(o, "ev"), *id = str(o, "run");
    if (o == NULL || !*ev || !*id) { json_decref(o); continue; }
    run *r = find_run(&runs, &nruns, &cap, id, 1);
    if (r == NULL) { oom = 1; json_decref(o); break; }
    if (!r->started[0]) snprintf(r->started, sizeof r->started, "%s", str(o, "ts"));
    long long seq = json_integer_value(json_object_get(o, "seq"));
    if (strcmp(ev, "run") == 0) {
      r->ended = 1;
      r->ok = json_is_true(json_object_get(o, "ok"));
      snprintf(r->code, sizeof r->code, "%s", str(o, "code"));
      r->ms = json_number_value(json_object_get(o, "ms"));
    }
    else if (strcmp(ev, "call") == 0 || strcmp(ev, "held") == 0 || strcmp(ev, "end") == 0) {
      call *c = find_call(r, seq, 1);
      if (c == NULL) { oom = 1; json_decref(o); break; }
      snprintf(c->tool, sizeof c->tool, "%s", str(o, "tool"));
      if (json_object_get(o, "line")) c->line = json_integer_value(json_object_get(o, "line"));
      if (strcmp(ev, "call") == 0) snprintf(c->state, sizeof c->state, "in flight");
      else if (strcmp(ev, "held") == 0) snprintf(c->state, sizeof c->state, "held");
      else {
        snprintf(c->code, sizeof c->code, "%s", str(o, "code"));
        c->ms = json_number_value(json_object_get(o, "ms"));
        snprintf(c->state, sizeof c->state, "%s", json_is_true(json_object_get(o, "ok")) ?
                 "made" : refused(c->code) ? "refused" : "failed");
      }
    }
    json_decref(o);
  }
  free(line);
  *runs_ = runs;
  *nruns_ = nruns;
  *cap_ = cap;
  return oom;
}

json_t *tp__audit_unfinished (const char *file, size_t max) {
  FILE *f = file ? fopen(file, "r") : NULL;
  if (f == NULL) return NULL;
  run *runs = NULL;
  size_t nruns = 0, cap = 0;
  int oom = load(f, &runs, &nruns, &cap);
  fclose(f);
  json_t *arr = oom ? NULL : json_array();
  for (size_t i = nruns, n = 0; arr && i-- > 0 && n < max;) {  /* the latest first */
    run *r = &runs[i];
    if (r->ended) continue;
    json_t *calls = json_array();
    for (size_t k = 0; calls && k < r->ncalls; k++) {
      call *c = &r->calls[k];
      json_array_append_new(calls, json_pack("{s:I, s:s, s:I, s:s, s:s}", "seq",
                            (json_int_t)c->seq, "tool", c->tool, "line", (json_int_t)c->line,
                            "state", c->state, "code", c->code));
    }
    json_array_append_new(arr, json_pack("{s:s, s:s, s:o*}", "run", r->id, "started",
                                         r->started, "calls", calls));
    n++;
  }
  for (size_t i = 0; i < nruns; i++) free(runs[i].calls);
  free(runs);
  return arr;
}

static void usage_error (const char *msg) {
  fprintf(stderr, "tidepool: audit: %s\nusage: tidepool audit show FILE [RUN] [--json]\n"
          "       tidepool audit show --state DIR|sqlite:PATH [RUN] [--json]\n", msg);
}

int tp__audit_main (int argc, char **argv, char *(*journal_of)(const char *state)) {
  const char *file = NULL, *want = NULL;
  char *owned = NULL;  /* --state's journal path */
  int json_out = 0;
  if (argc < 1 || strcmp(argv[0], "show") != 0) {
    usage_error(argc < 1 ? "what to do? (show)" : "unknown command (use show)");
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json_out = 1;
    else if (strcmp(argv[i], "--state") == 0 && file == NULL && owned == NULL) {
      if (i + 1 >= argc) { usage_error("--state needs the state location"); return 2; }
      owned = journal_of ? journal_of(argv[++i]) : NULL;
      if (owned == NULL) {
        fprintf(stderr, "tidepool: audit: --state %s keeps no journal file (a Redis or memory "
                "store): give the servers --audit FILE and read that\n", argv[i]);
        return 2;
      }
      file = owned;
    }
    else if (argv[i][0] == '-' && argv[i][1]) {
      usage_error("unknown option");
      free(owned);
      return 2;
    }
    else if (file == NULL) file = argv[i];
    else if (want == NULL) want = argv[i];
    else { usage_error("too many arguments"); free(owned); return 2; }
  }
  if (file == NULL) { usage_error("no FILE given (the --audit file, or --state DIR)"); return 2; }
  FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
  if (f == NULL) {
    fprintf(stderr, "tidepool: audit: cannot open %s: %s%s\n", file, strerror(errno),
            owned && errno == ENOENT ? " (no run has been journaled in this state yet)" : "");
    free(owned);
    return 2;
  }
  run *runs = NULL;
  size_t nruns = 0, cap = 0;
  int oom = load(f, &runs, &nruns, &cap);
  if (f != stdin) fclose(f);
  int status = 0;
  if (oom) { fprintf(stderr, "tidepool: audit: out of memory\n"); status = 1; }
  else if (want == NULL) {
    json_t *arr = json_out ? json_array() : NULL;
    if (!json_out) printf("%-16s  %-24s  %5s  %s\n", "RUN", "STARTED", "CALLS", "OUTCOME");
    for (size_t i = 0; i < nruns; i++) {
      run *r = &runs[i];
      const char *outcome = r->ended ? r->code : "died (no end recorded)";
      if (json_out)
        json_array_append_new(arr, json_pack("{s:s,s:s,s:I,s:b,s:s}", "run", r->id,
                              "started", r->started, "calls", (json_int_t)r->ncalls,
                              "ended", r->ended, "outcome", r->ended ? r->code : "died"));
      else printf("%-16s  %-24s  %5zu  %s\n", r->id, r->started, r->ncalls, outcome);
    }
    if (json_out) { char *t = json_dumps(arr, JSON_COMPACT); puts(t ? t : "[]"); free(t); }
    json_decref(arr);
  }
  else {
    run *r = NULL;
    int many = 0;
    for (size_t i = 0; i < nruns; i++)
      if (strncmp(runs[i].id, want, strlen(want)) == 0) { many += r != NULL; r = &runs[i]; }
    if (r == NULL || many) {
      fprintf(stderr, "tidepool: audit: %s run %s in %s (tidepool audit show %s lists "
              "them)\n", r ? "more than one" : "no", want, file, file);
      status = 2;
    }
    else {
      json_t *arr = json_out ? json_array() : NULL;
      if (!json_out) {
        printf("run %s, started %s: %s\n", r->id, r->started, r->ended ? (r->ok ?
               "ended ok" : "ended with an error") : "no end recorded: the process died "
               "or is still running");
        if (r->ended && !r->ok) printf("  outcome: %s\n", r->code);
        printf("%5s  %-32s  %5s  %-34s  %s\n", "SEQ", "TOOL", "LINE", "STATE", "MS");
      }
      for (size_t i = 0; i < r->ncalls; i++) {
        call *c = &r->calls[i];
        char state[128];
        if (strcmp(c->state, "made") == 0) snprintf(state, sizeof state, "made");
        else if (strcmp(c->state, "in flight") == 0)
          snprintf(state, sizeof state, r->ended ? "in flight" : "in flight when it died");
        else if (strcmp(c->state, "held") == 0)
          snprintf(state, sizeof state, "held (waiting for a person)");
        else snprintf(state, sizeof state, "%s %s", c->state, c->code);
        if (json_out)
          json_array_append_new(arr, json_pack("{s:I,s:s,s:I,s:s,s:s,s:f}", "seq",
                                (json_int_t)c->seq, "tool", c->tool, "line",
                                (json_int_t)c->line, "state", c->state, "code", c->code,
                                "ms", c->ms));
        else if (c->code[0] || strcmp(c->state, "made") == 0)
          printf("%5lld  %-32s  %5lld  %-34s  %.3f\n", c->seq, c->tool, c->line, state, c->ms);
        else printf("%5lld  %-32s  %5lld  %-34s  -\n", c->seq, c->tool, c->line, state);
      }
      if (json_out) {
        json_t *o = json_pack("{s:s,s:s,s:b,s:s,s:o}", "run", r->id, "started", r->started,
                              "ended", r->ended, "outcome", r->ended ? r->code : "died",
                              "calls", arr);
        char *t = json_dumps(o, JSON_COMPACT);
        puts(t ? t : "{}");
        free(t);
        json_decref(o);
      }
    }
  }
  for (size_t i = 0; i < nruns; i++) free(runs[i].calls);
  free(runs);
  free(owned);
  return status;
}
