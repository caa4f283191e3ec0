/*
** test_describe.c: what tp_engine_describe gives for tools registered from C with JSON
** Schema text: fields in the schema's order with the required ones first, the compact
** mode, and the run_lua tool in both modes.
*/
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "tp_test.h"

static tp_engine *engine_with_tool (void) {
  tp_engine *e = tp_engine_create();
  tp_tool_def d;
  memset(&d, 0, sizeof d);
  d.name = "crm.add_contact";
  d.description = "Add a contact.";
  d.input_schema = "{\"type\":\"object\",\"properties\":{"
    "\"zeta\":{\"type\":\"string\"},\"alpha\":{\"type\":\"integer\",\"minimum\":1},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"nick\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"email\"]}";
  d.output_schema = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"}},"
    "\"required\":[\"id\"]}";
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  return e;
}

TEST(full_text_keeps_the_schema_order_with_required_fields_first) {
  tp_engine *e = engine_with_tool();
  char *t = tp_engine_describe(e, "lua");
  CHECK_HAS(t, "\n\ncrm.add_contact{email: string(email), zeta?: string, alpha?: integer >=1, "
               "nick?: string|json.null} -> {id: string} -- Add a contact.\n");
  tp_free(t);
  tp_engine_destroy(e);
}

TEST(compact_text_is_one_line_per_tool) {
  tp_engine *e = engine_with_tool();
  char *t = tp_engine_describe(e, "compact");
  CHECK_HAS(t, "finds tools:\ncrm.add_contact{email, ...} -> {id}\n");
  CHECK(t != NULL && strstr(t, "zeta") == NULL);
  tp_free(t);
  tp_engine_destroy(e);
}

TEST(run_lua_tool_in_both_modes) {
  tp_engine *e = engine_with_tool();
  char *full = tp_engine_describe(e, "json");
  char *compact = tp_engine_describe(e, "json+compact");
  char *session = tp_engine_describe(e, "json+session+compact");
  CHECK_HAS(full, "zeta?: string, alpha?: integer >=1");
  CHECK_HAS(compact, "crm.add_contact{email, ...}");
  CHECK(compact != NULL && strstr(compact, "zeta") == NULL);
  CHECK_HAS(session, "\"session\"");
  CHECK(tp_engine_describe(e, "short") == NULL);
  CHECK(tp_engine_describe(e, "json+short") == NULL);
  CHECK(tp_engine_describe(e, "jsonx") == NULL);
  tp_free(full);
  tp_free(compact);
  tp_free(session);
  tp_engine_destroy(e);
}

/* auto: the full text, which fits here; fit: one line a tool; both as run_lua too */
TEST(auto_and_fit_choose_by_length) {
  tp_engine *e = engine_with_tool();
  char *full = tp_engine_describe(e, "lua"), *autot = tp_engine_describe(e, "auto");
  char *fit = tp_engine_describe(e, "fit"), *json = tp_engine_describe(e, "json+session+auto");
  CHECK(full != NULL && autot != NULL && strcmp(full, autot) == 0);
  CHECK_HAS(fit, "crm.add_contact{email, ...} -> {id}\n");
  CHECK_HAS(json, "zeta?: string, alpha?: integer >=1");
  CHECK_HAS(json, "\"session\"");
  tp_free(full);
  tp_free(autot);
  tp_free(fit);
  tp_free(json);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(full_text_keeps_the_schema_order_with_required_fields_first);
  RUN(compact_text_is_one_line_per_tool);
  RUN(run_lua_tool_in_both_modes);
  RUN(auto_and_fit_choose_by_length);
  return tp_test_end();
}
