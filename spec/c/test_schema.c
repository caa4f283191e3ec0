/*
** test_schema.c: the JSON Schema validator (engine/lib/schema.h): error paths, keywords and
** messages, formats, patterns, $ref, dialect selection, schemas rejected at compile time,
** recursion caps, NULL arguments, concurrent validation, and a speed figure.
*/
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "schema.h"
#include "tp_test.h"

static json_t *J (const char *text) {
  json_error_t e;
  json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
  if (!j) { printf("# bad JSON in test: %s: %s\n", text, e.text); abort(); }
  return j;
}

static tp_schema *C (const char *schema, char *err, size_t errlen) {
  json_t *j = J(schema);
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 1, err, errlen);
  json_decref(j);
  return s;
}

/* validate instance text; errors go to errs (cleared first) */
static int V (const tp_schema *s, const char *inst, tp_schema_errors *errs) {
  json_t *j = J(inst);
  tp__schema_errors_clear(errs);
  int r = tp__schema_validate(s, j, errs);
  int fast = tp__schema_validate(s, j, NULL);
  if (fast != r) printf("#   fast (%d) and full (%d) validation disagree on %s\n", fast, r, inst);
  json_decref(j);
  return r;
}

/* 1 valid, 0 invalid under a schema compiled from text (formats asserted) */
static int ok_ (const char *schema, const char *inst) {
  char err[256];
  tp_schema *s = C(schema, err, sizeof err);
  if (!s) { printf("#   schema did not compile: %s\n", err); return -2; }
  int r = V(s, inst, NULL);
  tp__schema_free(s);
  return r;
}

/* compile error message, or "" when it compiles */
static char errbuf[512];
static const char *bad (const char *schema) {
  tp_schema *s = C(schema, errbuf, sizeof errbuf);
  if (s) { tp__schema_free(s); return ""; }
  return errbuf;
}

TEST(type_error_names_expected_and_actual) {
  tp_schema_errors e = {0};
  tp_schema *s = C("{\"type\":\"string\"}", NULL, 0);
  CHECK_INT(V(s, "5", &e), 0);
  CHECK_INT(e.count, 1);
  CHECK_STR(e.items[0].path, "$");
  CHECK_STR(e.items[0].keyword, "type");
  CHECK_STR(e.items[0].message, "expected string, got integer 5");
  CHECK_INT(V(s, "\"x\"", &e), 1);
  CHECK_INT(e.count, 0);
  tp__schema_free(s);
  s = C("{\"type\":[\"string\",\"null\"]}", NULL, 0);
  CHECK_INT(V(s, "{}", &e), 0);
  CHECK_STR(e.items[0].message, "expected null or string, got object");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
}

TEST(required_reports_the_missing_property_at_the_object) {
  tp_schema_errors e = {0};
  tp_schema *s = C("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"minLength\":1}},"
                   "\"required\":[\"city\",\"units\"]}", NULL, 0);
  CHECK_INT(V(s, "{}", &e), 0);
  CHECK_INT(e.count, 2);
  CHECK_STR(e.items[0].path, "$");
  CHECK_STR(e.items[0].keyword, "required");
  CHECK_STR(e.items[0].message, "missing required property \"city\"");
  CHECK_STR(e.items[1].message, "missing required property \"units\"");
  CHECK_INT(V(s, "{\"city\":\"\",\"units\":1}", &e), 0);
  CHECK_INT(e.count, 1);
  CHECK_STR(e.items[0].path, "$.city");
  CHECK_STR(e.items[0].keyword, "minLength");
  CHECK_STR(e.items[0].message, "expected at least 1 character, got 0");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
}

TEST(paths_use_dots_indices_and_quoted_odd_keys) {
  tp_schema_errors e = {0};
  tp_schema *s = C("{\"properties\":{\"items\":{\"items\":{\"properties\":{\"name\":{\"type\":\"string\"}}}},"
                   "\"odd key\":{\"type\":\"integer\"},\"q\\\"t\":false}}", NULL, 0);
  CHECK_INT(V(s, "{\"items\":[{},{\"name\":\"a\"},{\"name\":3}],\"odd key\":1.5,\"q\\\"t\":0}", &e), 0);
  CHECK_INT(e.count, 3);
  CHECK_STR(e.items[0].path, "$.items[2].name");
  CHECK_STR(e.items[1].path, "$[\"odd key\"]");
  CHECK_STR(e.items[1].message, "expected integer, got number 1.5");
  CHECK_STR(e.items[2].path, "$[\"q\\\"t\"]");
  CHECK_STR(e.items[2].keyword, "properties");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
}

TEST(every_error_is_reported_sorted_by_path) {
  tp_schema_errors e = {0};
  tp_schema *s = C("{\"items\":{\"type\":\"integer\",\"maximum\":5}}", NULL, 0);
  CHECK_INT(V(s, "[1,\"a\",3,4,5,6,7,8,9,10,11,\"b\"]", &e), 0);
  CHECK_INT(e.count, 8);
  CHECK_STR(e.items[0].path, "$[1]");
  CHECK_STR(e.items[1].path, "$[5]");
  CHECK_STR(e.items[5].path, "$[9]");
  CHECK_STR(e.items[6].path, "$[10]");
  CHECK_STR(e.items[7].path, "$[11]");
  CHECK_STR(e.items[7].message, "expected integer, got string \"b\"");
  CHECK_STR(e.items[1].message, "expected at most 5, got 6");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
}

TEST(keyword_messages_are_actionable) {
  struct { const char *schema, *inst, *kw, *msg; } cases[] = {
    {"{\"enum\":[\"a\",\"b\"]}", "\"c\"", "enum", "expected one of \"a\", \"b\"; got \"c\""},
    {"{\"const\":5}", "6", "const", "expected 5, got 6"},
    {"{\"multipleOf\":3}", "7", "multipleOf", "expected a multiple of 3, got 7"},
    {"{\"exclusiveMaximum\":10}", "10", "exclusiveMaximum", "expected less than 10, got 10"},
    {"{\"minimum\":1.5}", "1", "minimum", "expected at least 1.5, got 1"},
    {"{\"exclusiveMinimum\":0}", "0", "exclusiveMinimum", "expected greater than 0, got 0"},
    {"{\"maxLength\":2}", "\"abc\"", "maxLength", "expected at most 2 characters, got 3"},
    {"{\"pattern\":\"^[a-z]+$\"}", "\"ABC\"", "pattern", "expected a string matching /^[a-z]+$/, got \"ABC\""},
    {"{\"maxItems\":1}", "[1,2]", "maxItems", "expected at most 1 item, got 2"},
    {"{\"uniqueItems\":true}", "[1,2,1]", "uniqueItems", "expected unique items, but items 0 and 2 are equal"},
    {"{\"minProperties\":1}", "{}", "minProperties", "expected at least 1 property, got 0"},
    {"{\"dependentRequired\":{\"a\":[\"b\"]}}", "{\"a\":1}", "dependentRequired",
     "missing property \"b\", required when \"a\" is present"},
    {"{\"not\":{\"type\":\"string\"}}", "\"x\"", "not", "expected a value that does not match the \"not\" schema"},
    {"{\"contains\":{\"type\":\"string\"}}", "[1]", "contains",
     "expected at least one item matching the \"contains\" schema, found none"},
    {"{\"contains\":{\"type\":\"string\"},\"maxContains\":1}", "[\"a\",\"b\"]", "maxContains",
     "expected at most 1 item matching the \"contains\" schema, found 2"},
    {"{\"properties\":{\"a\":true},\"additionalProperties\":false}", "{\"a\":1,\"zz\":2}", "additionalProperties",
     "unexpected property \"zz\" (allowed: \"a\")"},
    {"{\"unevaluatedProperties\":false,\"allOf\":[{\"properties\":{\"a\":true}}]}", "{\"a\":1,\"b\":2}",
     "unevaluatedProperties", "unexpected property \"b\""},
    {"{\"prefixItems\":[true],\"items\":false}", "[1,2]", "items", "item 1 is not allowed"},
    {"{\"propertyNames\":{\"maxLength\":2}}", "{\"abc\":1}", "propertyNames",
     "invalid property name \"abc\": expected at most 2 characters, got 3"},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":0}]}", "1", "oneOf",
     "expected a value matching exactly one schema of oneOf, but it matches 2 of them (at least schemas 0 and 1)"},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "[]", "anyOf",
     "expected a value matching at least one schema of anyOf, none matched: [0] expected string, got array; "
     "[1] expected integer, got array"},
    {"false", "1", "false", "no value is allowed here (the schema is false)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tp_schema_errors e = {0};
    char err[256];
    tp_schema *s = C(cases[i].schema, err, sizeof err);
    CHECK(s != NULL);
    if (!s) { printf("#   %s: %s\n", cases[i].schema, err); continue; }
    CHECK_INT(V(s, cases[i].inst, &e), 0);
    if (e.count) {
      CHECK_STR(e.items[0].keyword, cases[i].kw);
      CHECK_STR(e.items[0].message, cases[i].msg);
    } else {
      TP_FAIL_AT("no error for %s against %s", cases[i].inst, cases[i].schema);
    }
    tp__schema_errors_clear(&e);
    tp__schema_free(s);
  }
}

TEST(numbers_compare_by_value_so_1_0_is_integer_and_equals_1) {
  CHECK_INT(ok_("{\"type\":\"integer\"}", "1.0"), 1);
  CHECK_INT(ok_("{\"type\":\"integer\"}", "1.5"), 0);
  CHECK_INT(ok_("{\"enum\":[1]}", "1.0"), 1);
  CHECK_INT(ok_("{\"const\":{\"a\":[2.0]}}", "{\"a\":[2]}"), 1);
  CHECK_INT(ok_("{\"uniqueItems\":true}", "[1,1.0]"), 0);
  CHECK_INT(ok_("{\"maximum\":9007199254740993}", "9007199254740992"), 1);
  CHECK_INT(ok_("{\"maximum\":9007199254740992}", "9007199254740993"), 0);
  CHECK_INT(ok_("{\"multipleOf\":0.01}", "0.07"), 1);
  CHECK_INT(ok_("{\"multipleOf\":0.01}", "0.075"), 0);
  CHECK_INT(ok_("{\"multipleOf\":0.123456789}", "1e308"), 0);
}

TEST(string_lengths_count_code_points_not_bytes) {
  CHECK_INT(ok_("{\"maxLength\":5}", "\"h\\u00e9llo\""), 1);
  CHECK_INT(ok_("{\"maxLength\":1}", "\"\\ud83d\\udca9\""), 1);
  CHECK_INT(ok_("{\"minLength\":2}", "\"\\ud83d\\udca9\""), 0);
}

TEST(patterns_search_unanchored_with_ecma_semantics) {
  CHECK_INT(ok_("{\"pattern\":\"b\"}", "\"abc\""), 1);
  CHECK_INT(ok_("{\"pattern\":\"^b\"}", "\"abc\""), 0);
  CHECK_INT(ok_("{\"pattern\":\"^a$\"}", "\"a\\n\""), 0);   /* $ is end of input only */
  CHECK_INT(ok_("{\"pattern\":\"^\\\\d+$\"}", "\"\\u0661\""), 0);  /* \d is ASCII */
  CHECK_INT(ok_("{\"pattern\":\"^\\\\u00e9$\"}", "\"\\u00e9\""), 1);
  CHECK_INT(ok_("{\"pattern\":\"^\\\\p{Letter}+$\"}", "\"\\u00e9a\""), 1);
  CHECK_INT(ok_("{\"pattern\":\"^.$\"}", "\"\\u00e9\""), 1);  /* UTF mode */
  CHECK_INT(ok_("{\"patternProperties\":{\"^x-\":{\"type\":\"string\"}},\"additionalProperties\":false}",
                "{\"x-a\":\"1\"}"), 1);
  CHECK_INT(ok_("{\"patternProperties\":{\"^x-\":{\"type\":\"string\"}},\"additionalProperties\":false}",
                "{\"y\":\"1\"}"), 0);
}

TEST(catastrophic_pattern_fails_cleanly_instead_of_hanging) {
  char inst[200];
  memset(inst, 'a', sizeof inst);
  inst[0] = '"';
  memcpy(inst + sizeof inst - 4, "!\"", 3);
  tp_schema_errors e = {0};
  tp_schema *s = C("{\"pattern\":\"^(a+)+$\"}", NULL, 0);
  clock_t t0 = clock();
  CHECK_INT(V(s, inst, &e), 0);
  CHECK((clock() - t0) / CLOCKS_PER_SEC < 5);
  CHECK_INT(e.count, 1);
  if (e.count) CHECK_STR(e.items[0].keyword, "pattern");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
}

TEST(formats_assert_when_asked) {
  struct { const char *fmt, *good, *badv; } f[] = {
    {"date-time", "\"2024-02-29T12:30:00Z\"", "\"2023-02-29T12:30:00Z\""},
    {"date-time", "\"1998-12-31T23:59:60Z\"", "\"1998-12-31T23:58:60Z\""},
    {"date", "\"2024-01-31\"", "\"2024-1-31\""},
    {"time", "\"08:30:06.283185+01:00\"", "\"08:30:06\""},
    {"email", "\"joe.bloggs@example.com\"", "\"joe..bloggs@example.com\""},
    {"hostname", "\"www.example.com\"", "\"-bad.example.com\""},
    {"ipv4", "\"192.168.0.1\"", "\"192.168.0.01\""},
    {"ipv6", "\"::ffff:192.168.0.1\"", "\"1:2:3:4:5:6:7:8:9\""},
    {"ipv6", "\"fe80::1\"", "\"fe80:::1\""},
    {"uri", "\"https://example.com/a?b#c\"", "\"//example.com/no-scheme\""},
    {"uri", "\"urn:isbn:0451450523\"", "\"http://exa mple.com\""},
    {"uuid", "\"2eb8aa08-aa98-11ea-b4aa-73b441d16380\"", "\"2eb8aa08aa98-11ea-b4aa-73b441d16380\""},
    {"duration", "\"P1DT2H\"", "\"PT1D\""},
    {"json-pointer", "\"/a~1b\"", "\"/a~2b\""},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    char schema[100];
    snprintf(schema, sizeof schema, "{\"format\":\"%s\"}", f[i].fmt);
    if (ok_(schema, f[i].good) != 1) TP_FAIL_AT("%s should accept %s", f[i].fmt, f[i].good);
    if (ok_(schema, f[i].badv) != 0) TP_FAIL_AT("%s should reject %s", f[i].fmt, f[i].badv);
  }
  CHECK_INT(ok_("{\"format\":\"date\"}", "5"), 1);              /* formats apply to strings only */
  CHECK_INT(ok_("{\"format\":\"no-such-format\"}", "\"x\""), 1);  /* unknown formats pass */
  /* as annotations they never fail */
  json_t *j = J("{\"format\":\"email\"}"), *v = J("\"not an email\"");
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  CHECK_INT(tp__schema_validate(s, v, NULL), 1);
  tp__schema_free(s);
  json_decref(j);
  json_decref(v);
  tp_schema_errors e = {0};
  s = C("{\"format\":\"email\"}", NULL, 0);
  CHECK_INT(V(s, "\"nope\"", &e), 0);
  CHECK_STR(e.count ? e.items[0].message : "", "expected a valid email, got \"nope\"");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
}

TEST(refs_follow_pointers_with_escapes_anchors_and_ids) {
  CHECK_INT(ok_("{\"$defs\":{\"a/b\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/a~1b\"}", "1"), 1);
  CHECK_INT(ok_("{\"$defs\":{\"a/b\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/a~1b\"}", "\"x\""), 0);
  CHECK_INT(ok_("{\"$defs\":{\"t~i\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/t~0i\"}", "\"x\""), 0);
  CHECK_INT(ok_("{\"$defs\":{\"%\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/%25\"}", "\"x\""), 0);
  CHECK_INT(ok_("{\"$defs\":{\"x\":{\"$anchor\":\"num\",\"type\":\"number\"}},\"$ref\":\"#num\"}", "\"x\""), 0);
  CHECK_INT(ok_("{\"$id\":\"http://example.com/root.json\",\"$defs\":{\"x\":{\"$id\":\"item.json\","
                "\"type\":\"string\"}},\"items\":{\"$ref\":\"item.json\"}}", "[\"a\",1]"), 0);
  CHECK_INT(ok_("{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"$ref\":\"#/prefixItems/0\"}}", "[\"a\",\"b\"]"), 1);
  /* a recursive tree */
  const char *tree = "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}";
  CHECK_INT(ok_(tree, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]}]}"), 1);
  tp_schema_errors e = {0};
  tp_schema *s = C(tree, NULL, 0);
  CHECK_INT(V(s, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":\"3\"}]}]}", &e), 0);
  CHECK_STR(e.count ? e.items[0].path : "", "$.kids[0].kids[0].v");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
}

TEST(remote_refs_load_only_from_remotes_dir) {
  char err[256];
  json_t *j = J("{\"$ref\":\"http://localhost:1234/integer.json\"}");
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, err, sizeof err);
  CHECK(s == NULL);
  CHECK_HAS(err, "cannot resolve $ref \"http://localhost:1234/integer.json\" (remote references are disabled)");
  const char *suite = getenv("TP_SCHEMA_SUITE");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/remotes", suite && *suite ? suite : "../shared/json-schema-test-suite");
  s = tp__schema_compile(j, TP_DIALECT_2020_12, dir, 0, err, sizeof err);
  CHECK(s != NULL);
  json_t *one = J("1"), *str = J("\"a\"");
  CHECK_INT(tp__schema_validate(s, one, NULL), 1);
  CHECK_INT(tp__schema_validate(s, str, NULL), 0);
  tp__schema_free(s);
  json_decref(j);
  /* no escaping the directory, and no other hosts */
  j = J("{\"$ref\":\"http://localhost:1234/../remotes/integer.json\"}");
  CHECK(tp__schema_compile(j, TP_DIALECT_2020_12, dir, 0, err, sizeof err) == NULL);
  json_decref(j);
  j = J("{\"$ref\":\"http://example.com/integer.json\"}");
  CHECK(tp__schema_compile(j, TP_DIALECT_2020_12, dir, 0, err, sizeof err) == NULL);
  CHECK_HAS(err, "at #/$ref: cannot resolve $ref \"http://example.com/integer.json\"");
  json_decref(j);
  json_decref(one);
  json_decref(str);
}

TEST(metaschema_refs_resolve_without_network) {
  CHECK_INT(ok_("{\"$ref\":\"https://json-schema.org/draft/2020-12/schema\"}", "{\"minLength\":1}"), 1);
  CHECK_INT(ok_("{\"$ref\":\"https://json-schema.org/draft/2020-12/schema\"}", "{\"minLength\":-1}"), 0);
  CHECK_INT(ok_("{\"$ref\":\"http://json-schema.org/draft-07/schema#\"}", "{\"type\":\"strin\"}"), 0);
}

TEST(dialect_comes_from_dollar_schema_else_the_default) {
  const char *d7 = "{\"$schema\":\"http://json-schema.org/draft-07/schema#\","
                   "\"definitions\":{\"s\":{\"type\":\"string\"}},"
                   "\"properties\":{\"a\":{\"$ref\":\"#/definitions/s\",\"type\":\"integer\"},"
                   "\"t\":{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":false}}}";
  tp_schema *s = C(d7, NULL, 0);
  CHECK(s != NULL);
  CHECK_INT(tp__schema_dialect(s), TP_DIALECT_DRAFT7);
  CHECK_INT(V(s, "{\"a\":\"x\"}", NULL), 1);     /* draft-07: $ref ignores its siblings */
  CHECK_INT(V(s, "{\"t\":[1]}", NULL), 1);
  CHECK_INT(V(s, "{\"t\":[1,2]}", NULL), 0);
  tp__schema_free(s);
  const char *d2020 = "{\"$defs\":{\"s\":{\"type\":\"string\"}},"
                      "\"properties\":{\"a\":{\"$ref\":\"#/$defs/s\",\"type\":\"integer\"}}}";
  s = C(d2020, NULL, 0);
  CHECK_INT(tp__schema_dialect(s), TP_DIALECT_2020_12);
  CHECK_INT(V(s, "{\"a\":\"x\"}", NULL), 0);     /* 2020-12: $ref and siblings both apply */
  tp__schema_free(s);
  /* the default dialect applies without $schema */
  json_t *j = J("{\"dependencies\":{\"a\":[\"b\"]}}"), *inst = J("{\"a\":1}");
  s = tp__schema_compile(j, TP_DIALECT_DRAFT7, NULL, 0, NULL, 0);
  CHECK_INT(tp__schema_dialect(s), TP_DIALECT_DRAFT7);
  CHECK_INT(tp__schema_validate(s, inst, NULL), 0);
  tp__schema_free(s);
  s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  CHECK_INT(tp__schema_validate(s, inst, NULL), 1);  /* not a 2020-12 keyword */
  tp__schema_free(s);
  json_decref(j);
  json_decref(inst);
  /* unevaluatedProperties is a 2020-12 keyword only */
  CHECK_INT(ok_("{\"$schema\":\"http://json-schema.org/draft-07/schema\",\"unevaluatedProperties\":false}",
                "{\"a\":1}"), 1);
}

TEST(bad_schemas_are_rejected_at_compile_time_with_their_location) {
  CHECK_STR(bad("{\"properties\":{\"city\":{\"minLength\":-1}}}"),
            "at #/properties/city/minLength: expected a non-negative integer");
  CHECK_STR(bad("{\"type\":\"strin\"}"),
            "at #/type: unknown type \"strin\" (expected null, boolean, integer, number, string, array or object)");
  CHECK_HAS(bad("{\"pattern\":\"(\"}"), "at #/pattern: invalid regular expression \"(\"");
  CHECK_HAS(bad("{\"patternProperties\":{\"[\":true}}"), "at #/patternProperties/[: invalid regular expression");
  CHECK_STR(bad("{\"multipleOf\":0}"), "at #/multipleOf: expected a number greater than 0");
  CHECK_STR(bad("{\"maximum\":\"5\"}"), "at #/maximum: expected a number");
  CHECK_STR(bad("{\"required\":[1]}"), "at #/required: expected an array of strings");
  CHECK_STR(bad("{\"allOf\":[]}"), "at #/allOf: expected a non-empty array of schemas");
  CHECK_STR(bad("{\"anyOf\":[{},3]}"), "at #/anyOf/1: expected a schema (an object or a boolean)");
  CHECK_STR(bad("{\"items\":{\"not\":\"x\"}}"), "at #/items/not: expected a schema (an object or a boolean)");
  CHECK_STR(bad("{\"properties\":{\"a/b\":{\"type\":7}}}"),
            "at #/properties/a~1b/type: expected a type name or a non-empty array of type names");
  CHECK_STR(bad("{\"$ref\":\"#/$defs/missing\"}"), "at #/$ref: cannot resolve $ref \"" "tidepool://local/root.json#/$defs/missing\"");
  CHECK_STR(bad("{\"$ref\":\"#nope\"}"), "at #/$ref: cannot resolve $ref \"tidepool://local/root.json#nope\"");
  CHECK_STR(bad("{\"uniqueItems\":1}"), "at #/uniqueItems: expected a boolean");
  CHECK_STR(bad("{\"enum\":{}}"), "at #/enum: expected an array");
  CHECK_STR(bad("{\"dependentRequired\":{\"a\":\"b\"}}"), "at #/dependentRequired/a: expected an array of strings");
  CHECK_STR(bad("3"), "at #: expected a schema (an object or a boolean)");
  CHECK_STR(bad("{\"properties\":{\"a\":{}}}"), "");
  CHECK_STR(bad("{\"minLength\":2.0}"), "");  /* 2.0 is an integer */
}

TEST(deep_schema_nesting_is_capped_at_compile_time) {
  size_t depth = TP_SCHEMA_MAX_DEPTH + 10, n = 0;
  char *text = malloc(depth * 12 + 10);
  for (size_t i = 0; i < depth; i++) n += (size_t)sprintf(text + n, "{\"not\":");
  n += (size_t)sprintf(text + n, "true");
  for (size_t i = 0; i < depth; i++) text[n++] = '}';
  text[n] = 0;
  CHECK_HAS(bad(text), "schema nested too deeply");
  free(text);
}

TEST(ref_cycles_and_deep_instances_fail_cleanly) {
  tp_schema_errors e = {0};
  tp_schema *s = C("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
                   "\"$ref\":\"#/$defs/a\"}", NULL, 0);
  CHECK(s != NULL);
  CHECK_INT(V(s, "1", &e), 0);
  CHECK_HAS(e.count ? e.items[0].message : "", "infinite recursion");
  tp__schema_free(s);
  s = C("{\"$ref\":\"#\"}", NULL, 0);
  CHECK_INT(V(s, "{}", &e), 0);
  tp__schema_free(s);
  /* an instance deeper than the cap, under a recursive schema */
  size_t depth = TP_SCHEMA_MAX_DEPTH + 50, n = 0;
  char *text = malloc(depth * 2 + 2);
  for (size_t i = 0; i < depth; i++) text[n++] = '[';
  for (size_t i = 0; i < depth; i++) text[n++] = ']';
  text[n] = 0;
  s = C("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}", NULL, 0);
  CHECK_INT(V(s, text, &e), 0);
  CHECK_INT(e.count, 1);
  CHECK_HAS(e.count ? e.items[0].message : "", "nested too deeply");
  tp__schema_free(s);
  /* a moderately deep one passes */
  n = 0;
  for (size_t i = 0; i < 40; i++) text[n++] = '[';
  for (size_t i = 0; i < 40; i++) text[n++] = ']';
  text[n] = 0;
  s = C("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}", NULL, 0);
  CHECK_INT(V(s, text, &e), 1);
  tp__schema_free(s);
  free(text);
  tp__schema_errors_clear(&e);
}

TEST(unevaluated_and_dynamic_refs_work_together) {
  const char *sch = "{\"$id\":\"http://example.com/list\",\"$dynamicAnchor\":\"item\","
                    "\"$defs\":{\"item\":{\"$dynamicAnchor\":\"item\"}},"
                    "\"type\":\"array\",\"items\":{\"$dynamicRef\":\"#item\"}}";
  CHECK_INT(ok_(sch, "[[],[[]]]"), 1);
  CHECK_INT(ok_("{\"allOf\":[{\"prefixItems\":[true]}],\"unevaluatedItems\":false}", "[1]"), 1);
  CHECK_INT(ok_("{\"allOf\":[{\"prefixItems\":[true]}],\"unevaluatedItems\":false}", "[1,2]"), 0);
  CHECK_INT(ok_("{\"anyOf\":[{\"properties\":{\"a\":true}},{\"properties\":{\"b\":true}}],"
                "\"unevaluatedProperties\":false}", "{\"a\":1,\"b\":2}"), 1);
  CHECK_INT(ok_("{\"if\":{\"properties\":{\"a\":{\"const\":1}}},\"then\":{\"properties\":{\"b\":true}},"
                "\"unevaluatedProperties\":false}", "{\"a\":2}"), 0);
}

TEST(null_arguments_are_handled) {
  char err[128];
  CHECK(tp__schema_compile(NULL, TP_DIALECT_2020_12, NULL, 0, err, sizeof err) == NULL);
  CHECK_STR(err, "at #: schema is NULL");
  CHECK(tp__schema_compile(NULL, TP_DIALECT_2020_12, NULL, 0, NULL, 0) == NULL);
  json_t *j = J("{}");
  CHECK(tp__schema_compile(j, (tp_dialect)7, NULL, 0, err, sizeof err) == NULL);
  CHECK_HAS(err, "unknown dialect");
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);  /* err may be NULL */
  CHECK(s != NULL);
  CHECK_INT(tp__schema_validate(NULL, j, NULL), -1);
  CHECK_INT(tp__schema_validate(s, NULL, NULL), -1);
  CHECK_INT(tp__schema_validate(s, j, NULL), 1);
  CHECK_INT(tp__schema_dialect(NULL), TP_DIALECT_2020_12);
  CHECK_INT(tp__schema_format_check(NULL, "x", 1), -1);
  CHECK_INT(tp__schema_format_check("date", NULL, 0), -1);
  tp__schema_errors_clear(NULL);
  tp__schema_free(NULL);
  tp__schema_free(s);
  json_decref(j);
}

TEST(errors_append_and_clear) {
  tp_schema_errors e = {0};
  json_t *j = J("{\"type\":\"string\"}"), *a = J("1"), *b = J("2");
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  CHECK_INT(tp__schema_validate(s, a, &e), 0);
  CHECK_INT(tp__schema_validate(s, b, &e), 0);
  CHECK_INT(e.count, 2);
  tp__schema_errors_clear(&e);
  CHECK_INT(e.count, 0);
  CHECK(e.items == NULL);
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
  json_decref(j);
  json_decref(a);
  json_decref(b);
}

typedef struct { const tp_schema *s; json_t *good, *badv; int failures; } thr_arg;

static void *thr (void *p) {
  thr_arg *a = p;
  for (int i = 0; i < 2000; i++) {
    tp_schema_errors e = {0};
    if (tp__schema_validate(a->s, a->good, NULL) != 1) a->failures++;
    if (tp__schema_validate(a->s, a->badv, &e) != 0 || e.count != 2) a->failures++;
    tp__schema_errors_clear(&e);
  }
  return NULL;
}

TEST(one_compiled_schema_validates_on_many_threads) {
  json_t *j = J("{\"properties\":{\"id\":{\"pattern\":\"^[a-z]+-[0-9]+$\"},"
                "\"tags\":{\"items\":{\"pattern\":\"^#\"}}},\"unevaluatedProperties\":false}");
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  thr_arg args[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (thr_arg){s, J("{\"id\":\"abc-12\",\"tags\":[\"#a\",\"#b\"]}"),
                        J("{\"id\":\"ABC\",\"tags\":[\"#a\",\"b\"]}"), 0};
    pthread_create(&t[i], NULL, thr, &args[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_INT(args[i].failures, 0);
    json_decref(args[i].good);
    json_decref(args[i].badv);
  }
  tp__schema_free(s);
  json_decref(j);
}

static int cmp_double (const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double now_ns (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

TEST(validation_is_fast_for_a_small_object) {
  json_t *j = J("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"minLength\":1},"
                "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
                "\"units\":{\"enum\":[\"metric\",\"imperial\"]}},\"required\":[\"city\"],"
                "\"additionalProperties\":false}");
  json_t *inst = J("{\"city\":\"Paris\",\"days\":3,\"units\":\"metric\"}");
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  double runs[7];
  int iters = 200000, valid = 1;
  for (int r = 0; r < 7; r++) {
    double t0 = now_ns();
    for (int i = 0; i < iters; i++) valid &= tp__schema_validate(s, inst, NULL) == 1;
    runs[r] = (now_ns() - t0) / iters;
  }
  qsort(runs, 7, sizeof *runs, cmp_double);
  printf("# schema validate, 3-property object: %.0f ns (median of 7 runs of %d)\n", runs[3], iters);
  CHECK(valid);
  CHECK(runs[3] < 200000);  /* only a sanity bound: sanitizer and valgrind builds run this too */
  tp__schema_free(s);
  json_decref(j);
  json_decref(inst);
}

/* The work a validation does, as the number of times it asks whether to stop (every
** 4096 units of work): a figure that does not depend on the machine. */
static int polls;
static int count_polls (void *ud) { (void)ud; polls++; return 0; }
static int stop_now (void *ud) { (void)ud; polls++; return 1; }

TEST(unique_items_of_100k_values_is_not_quadratic) {
  json_t *j = J("{\"uniqueItems\":true}"), *a = json_array();
  for (int i = 0; i < 100000; i++)
    json_array_append_new(a, i % 2 ? json_integer(i) : json_pack("{s:i,s:[i]}", "k", i, "v", i));
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  tp_schema_bounds b = { 0, count_polls, NULL };
  tp_schema_errors e = {0};
  polls = 0;
  double t0 = now_ns();
  CHECK_INT(tp__schema_validate_bounded(s, a, &e, &b), 1);
  printf("# uniqueItems over 100000 distinct items: %.1f ms, %d polls\n",
         (now_ns() - t0) / 1e6, polls);
  CHECK(polls < 500);  /* pairwise comparison was 5e9 comparisons */
  /* equal values found whatever their order or number type, first pair reported */
  json_array_append_new(a, json_pack("{s:[f],s:f}", "v", 6.0, "k", 6.0));
  json_array_append_new(a, json_real(99999.0));
  polls = 0;
  CHECK_INT(tp__schema_validate_bounded(s, a, &e, &b), 0);
  CHECK_INT(e.count, 1);
  CHECK_STR(e.count ? e.items[0].message : "", "expected unique items, but items 6 and 100000 are equal");
  CHECK(polls < 500);
  CHECK_INT(tp__schema_validate(s, a, NULL), 0);
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
  json_decref(j);
  json_decref(a);
}

TEST(errors_are_capped_at_20_then_and_n_more) {
  json_t *j = J("{\"items\":{\"type\":\"string\"}}"), *a = json_array();
  for (int i = 0; i < 100; i++) json_array_append_new(a, json_integer(i));
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  tp_schema_errors e = {0};
  CHECK_INT(tp__schema_validate(s, a, &e), 0);
  CHECK_INT(e.count, TP_SCHEMA_MAX_ERRORS);
  CHECK_INT(e.more, 80);
  CHECK_STR(e.items[19].path, "$[19]");
  char text[4000];
  tp__schema_errors_text(&e, 20, text, sizeof text);
  CHECK_HAS(text, "$[19]: expected string, got integer 19; and 80 more");
  tp__schema_errors_text(&e, 2, text, sizeof text);
  CHECK_STR(text, "$[0]: expected string, got integer 0; $[1]: expected string, got integer 1; "
                  "and 98 more");
  tp__schema_errors_clear(&e);
  CHECK_INT(e.more, 0);
  tp_schema_bounds b = { 3, NULL, NULL };
  CHECK_INT(tp__schema_validate_bounded(s, a, &e, &b), 0);
  CHECK_INT(e.count, 3);
  CHECK_INT(e.more, 97);
  tp__schema_errors_text(&e, 8, text, sizeof text);
  CHECK_STR(text, "$[0]: expected string, got integer 0; $[1]: expected string, got integer 1; "
                  "$[2]: expected string, got integer 2; and 97 more");
  tp__schema_errors_text(&e, 8, text, 20);
  CHECK_STR(text, "$[0]: expected s...");
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
  json_decref(j);
  json_decref(a);
}

TEST(validation_stops_when_its_run_says_so) {
  json_t *j = J("{\"items\":{\"type\":\"integer\",\"minimum\":0}}"), *a = json_array();
  for (int i = 0; i < 100000; i++) json_array_append_new(a, json_integer(-i));
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  tp_schema_errors e = {0};
  tp_schema_bounds b = { 0, stop_now, NULL };
  polls = 0;
  CHECK_INT(tp__schema_validate_bounded(s, a, &e, &b), -2);
  CHECK_INT(polls, 1);
  CHECK_INT(e.count, 0);
  CHECK_INT(e.more, 0);
  tp__schema_errors_clear(&e);
  json_t *good = json_array();  /* the fast check (no errors wanted) stops too */
  for (int i = 0; i < 100000; i++) json_array_append_new(good, json_integer(i));
  polls = 0;
  CHECK_INT(tp__schema_validate_bounded(s, good, NULL, &b), -2);
  CHECK_INT(polls, 1);
  json_decref(good);
  tp__schema_free(s);
  json_decref(j);
  json_decref(a);
}

TEST(a_huge_property_name_is_cut_in_messages_and_paths) {
  size_t n = 1 << 20;
  char *k = malloc(n + 1);
  memset(k, 'k', n);
  k[n] = 0;
  k[62] = '\xc3';  /* a two-byte character across the cut at 64 bytes */
  k[63] = '\xa9';
  k[64] = '\xc3';
  k[65] = '\xa9';
  json_t *j = J("{\"properties\":{\"a\":{\"properties\":{\"b\":true},\"additionalProperties\":false}}}");
  json_t *inner = json_object(), *inst = json_object();
  json_object_set_new(inner, k, json_integer(1));
  json_object_set_new(inst, "a", inner);
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  tp_schema_errors e = {0};
  CHECK_INT(tp__schema_validate(s, inst, &e), 0);
  CHECK_INT(e.count, 1);
  if (e.count) {
    char want[200];
    snprintf(want, sizeof want, "$.a[\"%.64s...\"]", k);
    CHECK_STR(e.items[0].path, want);
    snprintf(want, sizeof want, "unexpected property \"%.64s...\" (allowed: \"b\")", k);
    CHECK_STR(e.items[0].message, want);
  }
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
  json_decref(j);
  json_decref(inst);
  free(k);
}

TEST(unevaluated_properties_of_a_100k_key_object_is_not_quadratic) {
  json_t *j = J("{\"allOf\":[{\"properties\":{\"z\":true}},{\"patternProperties\":{\"^k1\":true}}],"
                "\"unevaluatedProperties\":{\"type\":\"integer\"}}"), *o = json_object();
  char key[32];
  for (int i = 0; i < 100000; i++) {
    snprintf(key, sizeof key, "k%d", i);
    json_object_set_new(o, key, i == 77777 ? json_string("x") : json_integer(i));
  }
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  tp_schema_bounds b = { 0, count_polls, NULL };
  tp_schema_errors e = {0};
  polls = 0;
  CHECK_INT(tp__schema_validate_bounded(s, o, &e, &b), 0);
  CHECK_INT(e.count, 1);
  CHECK_STR(e.count ? e.items[0].path : "", "$.k77777");
  CHECK(polls < 500);
  tp__schema_errors_clear(&e);
  tp__schema_free(s);
  json_decref(j);
  json_decref(o);
}

TEST(format_checks_of_huge_strings_stay_linear) {
  size_t n = 4 << 20;
  char *v = malloc(n + 1);
  memset(v, 'a', n);  /* "x:aaa...//[[[...": each bracket looked for the first '/' */
  memcpy(v, "x:", 2);
  memcpy(v + n / 2, "//", 2);
  for (size_t i = n / 2 + 2; i < n; i++) v[i] = '[';
  v[n] = 0;
  json_t *str = json_string(v);
  json_t *j = J("{\"format\":\"uri-reference\"}");
  tp_schema *s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 1, NULL, 0);
  double t0 = now_ns();
  CHECK_INT(tp__schema_validate(s, str, NULL), 1);
  printf("# format uri-reference of a 4 MiB string of brackets: %.1f ms (was quadratic: 11 s "
         "for 1 MiB)\n", (now_ns() - t0) / 1e6);
  tp__schema_free(s);
  json_decref(j);
  j = J("{\"format\":\"regex\"}");  /* over 256 KiB, not taken for a regular expression */
  s = tp__schema_compile(j, TP_DIALECT_2020_12, NULL, 1, NULL, 0);
  memset(v, 'a', n);
  json_decref(str);
  str = json_string(v);
  CHECK_INT(tp__schema_validate(s, str, NULL), 0);
  CHECK_INT(tp__schema_format_check("regex", v, 1000), 1);
  tp__schema_free(s);
  json_decref(j);
  json_decref(str);
  free(v);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(type_error_names_expected_and_actual);
  RUN(required_reports_the_missing_property_at_the_object);
  RUN(paths_use_dots_indices_and_quoted_odd_keys);
  RUN(every_error_is_reported_sorted_by_path);
  RUN(keyword_messages_are_actionable);
  RUN(numbers_compare_by_value_so_1_0_is_integer_and_equals_1);
  RUN(string_lengths_count_code_points_not_bytes);
  RUN(patterns_search_unanchored_with_ecma_semantics);
  RUN(catastrophic_pattern_fails_cleanly_instead_of_hanging);
  RUN(formats_assert_when_asked);
  RUN(refs_follow_pointers_with_escapes_anchors_and_ids);
  RUN(remote_refs_load_only_from_remotes_dir);
  RUN(metaschema_refs_resolve_without_network);
  RUN(dialect_comes_from_dollar_schema_else_the_default);
  RUN(bad_schemas_are_rejected_at_compile_time_with_their_location);
  RUN(deep_schema_nesting_is_capped_at_compile_time);
  RUN(ref_cycles_and_deep_instances_fail_cleanly);
  RUN(unevaluated_and_dynamic_refs_work_together);
  RUN(null_arguments_are_handled);
  RUN(errors_append_and_clear);
  RUN(one_compiled_schema_validates_on_many_threads);
  RUN(validation_is_fast_for_a_small_object);
  RUN(unique_items_of_100k_values_is_not_quadratic);
  RUN(errors_are_capped_at_20_then_and_n_more);
  RUN(validation_stops_when_its_run_says_so);
  RUN(a_huge_property_name_is_cut_in_messages_and_paths);
  RUN(unevaluated_properties_of_a_100k_key_object_is_not_quadratic);
  RUN(format_checks_of_huge_strings_stay_linear);
  return tp_test_end();
}
