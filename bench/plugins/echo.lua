-- The Lua plugin tool of lua_tool_call_us (bench/bench_tools.c): the Lua twin of the
-- C tool bench.echo, with the same three-field input schema; it answers at once.
return {
  name = "bench.lua_echo",
  description = "Answers at once (a Lua plugin).",
  input = {
    type = "object",
    required = { "id", "name" },
    additionalProperties = false,
    properties = {
      id = { type = "integer", minimum = 0 },
      name = { type = "string", minLength = 1 },
      flag = { type = "boolean" },
    },
  },
  handler = function(_, _)
    return { ok = true }
  end,
}
