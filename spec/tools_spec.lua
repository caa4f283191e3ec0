-- Tool calls from the script (engine/core/tools.c, engine/core/sandbox.c): yields through the
-- script's coroutines, where Lua cannot yield, forged yields, parallel, error objects,
-- schema validation, values across the boundary, tool limits and the envelope's calls.
-- Fixture tools: spec/fixtures/tools_calls (fx.* and weather.*).
local tidepool = require("tidepool")

local DIR = "spec/fixtures/tools_calls"

local function run(src, opts)
  opts = opts or {}
  opts.tools = { DIR }
  return tidepool.run(src, opts)
end

-- Runs src and asserts it succeeded; returns the result.
local function result(src, opts)
  local env = run(src, opts)
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message))
  return env.result, env
end

-- "tool=true" or "tool=code" for a call of the envelope
local function outcome(c) return c.tool .. "=" .. tostring(c.error or c.ok) end

-- The outcomes of an envelope's calls, in order.
local function calls_of(env)
  local seen = {}
  for i, c in ipairs(env.calls) do seen[i] = outcome(c) end
  return seen
end

local NO_YIELD = "a tool was called where Lua cannot wait for it: inside a function that C "
  .. "code called (a gsub or table.sort callback, an xpcall message handler, a metamethod run "
  .. "by a library function such as tostring); call it outside that callback and pass the "
  .. "result in"

describe("a tool call yields to the host through", function()
  it("coroutine.wrap inside pcall", function()
    local r = result([[
      local ok, v = pcall(coroutine.wrap(function() return tools.fx.nap{ms = 5}.ms + 1 end))
      return {ok, v}
    ]])
    assert.same({ true, 6 }, r)
  end)

  it("coroutine.resume, and the coroutine's own yields still reach the script", function()
    local r = result([[
      local co = coroutine.create(function(x)
        local a = tools.fx.nap{ms = 5, tag = "a"}
        local y = coroutine.yield(x + a.ms)
        return tools.fx.echo{v = y}.v
      end)
      local ok1, v1 = coroutine.resume(co, 10)
      local ok2, v2 = coroutine.resume(co, "back")
      return {ok1, v1, ok2, v2, coroutine.status(co)}
    ]])
    assert.same({ true, 15, true, "back", "dead" }, r)
  end)

  it("xpcall with a message handler", function()
    local r = result([[
      local a = {xpcall(function() return tools.fx.nap{ms = 5}.ms end, tostring)}
      local b = {xpcall(function() tools.fx.fail{code = "tool.denied", message = "no", ms = 2} end,
                        function(e) return "handled " .. e.code end)}
      return {a, b}
    ]])
    assert.same({ { true, 5 }, { false, "handled tool.denied" } }, r)
  end)

  it("an __index metamethod written in Lua", function()
    local r = result([[
      local t = setmetatable({}, {__index = function(_, k)
        return tools.fx.nap{ms = 2, tag = k}.tag
      end})
      return t.hello .. t.world
    ]])
    assert.equal("helloworld", r)
  end)
end)

describe("where Lua cannot yield, a tool that must wait is a clear error", function()
  it("in a gsub callback: the message says why and what to do, with the line", function()
    local env = run("local x = 1\nreturn (string.gsub('ab', '%w', function(c)\n"
      .. "  return tools.fx.nap{ms = 1}.ms end))")
    assert.is_false(env.ok)
    assert.equal("runtime", env.error.code)
    assert.equal(NO_YIELD, env.error.message)
    assert.equal(3, env.error.line)
    -- refused before it started, and still counted and listed
    assert.same({ "fx.nap=runtime" }, calls_of(env))
    assert.equal(3, env.calls[1].line)
    assert.same({}, env.logs)
  end)

  it("in a table.sort comparator", function()
    local env = run([[
      local t = {3, 1, 2}
      table.sort(t, function(a, b) tools.fx.nap{ms = 1} return a < b end)
      return t
    ]])
    assert.is_false(env.ok)
    assert.equal(NO_YIELD, env.error.message)
    assert.same({ "fx.nap=runtime" }, calls_of(env))
  end)

  it("in a __tostring called by tostring(), and pcall catches it", function()
    local r, env = result([[
      local t = setmetatable({}, {__tostring = function() return tools.fx.nap{ms = 1}.tag end})
      local ok, e = pcall(tostring, t)
      return {ok, e}
    ]])
    assert.same({ false, "script:1: " .. NO_YIELD }, r)
    assert.same({ "fx.nap=runtime" }, calls_of(env))
  end)

  it("even a tool that would answer at once is refused there, before it starts", function()
    local r, env = result([[
      local ok, e = pcall(string.gsub, "ab", "%w",
        function(c) return tools.fx.put{key = "gsub." .. c, value = 1}.stored end)
      return {ok, e, #tools.fx.keys{prefix = "gsub."}.keys}
    ]])
    assert.same({ false, "script:2: " .. NO_YIELD, 0 }, r)
    assert.same({ "fx.put=runtime", "fx.keys=true" }, calls_of(env))  -- fx.put never ran
  end)

  it("in an xpcall message handler: no call starts, however often Lua retries it", function()
    local r, env = result([[
      local ok, e = xpcall(function() error("first") end,
        function() return tools.fx.put{key = "xph.a", value = 1}.stored end)
      return {ok, e, #tools.fx.keys{prefix = "xph."}.keys}
    ]])
    assert.same({ false, "error in error handling", 0 }, r)
    -- Lua calls the handler again for each error it raises, 107 times here (up to its C
    -- stack limit): each attempt is refused, and each one counts. The calls past the
    -- first 100 are counted in the summary record.
    assert.equal(101, #env.calls)
    for i = 1, 100 do assert.equal("fx.put=runtime", outcome(env.calls[i])) end
    assert.same({ summary = true, calls = 8, failed = 7,
                  by_tool = { ["fx.put"] = 7, ["fx.keys"] = 1 } }, env.calls[101])
  end)
end)

describe("a forged yield", function()
  it("coroutine.yield('tool', ...) at the top level is a runtime error", function()
    local env = run([[coroutine.yield("tool", "fx.echo", {})]])
    assert.is_false(env.ok)
    assert.equal("runtime", env.error.code)
    assert.equal("attempt to yield from outside a coroutine", env.error.message)
    assert.same({}, env.calls)
  end)

  it("a userdata yielded from a coroutine goes to its resumer, not to the host", function()
    local r, env = result([[
      local co = coroutine.wrap(function()
        coroutine.yield(json.null, 1)
        coroutine.yield("tool", "fx.echo", {x = 1})
        return "after"
      end)
      local a, b = co()
      local c, d = co()
      return {a == json.null, b, c, d, co()}
    ]])
    assert.same({ true, 1, "tool", "fx.echo", "after" }, r)
    assert.same({}, env.calls)
  end)

  it("coroutine.yield directly in a parallel branch is that branch's error", function()
    local r = result([[
      local ok, e = pcall(parallel,
        function() return tools.fx.put{key = "forge.a", value = 1, ms = 5}.stored end,
        function() coroutine.yield("tool", "fx.echo") return "never" end)
      return {ok, e, tools.fx.keys{prefix = "forge."}.keys}
    ]])
    assert.same({ false, "coroutine.yield was called directly in a parallel branch "
      .. "(yield only inside your own coroutines)", { "forge.a" } }, r)
  end)
end)

describe("parallel", function()
  it("returns each function's first value, in argument order", function()
    local r = result([[
      local a, b, c = parallel(
        function() return tools.fx.nap{ms = 30, tag = "slow"}.tag, "second" end,
        function() return tools.fx.nap{ms = 1, tag = "fast"}.tag end,
        function() return 3, 4 end)
      return {a, b, c}
    ]])
    assert.same({ "slow", "fast", 3 }, r)
  end)

  it("runs the calls at the same time (3 x 50 ms well under 150 ms)", function()
    local _, env = result([[
      return {parallel(function() return tools.fx.nap{ms = 50} end,
                       function() return tools.fx.nap{ms = 50} end,
                       function() return tools.fx.nap{ms = 50} end)}
    ]])
    assert.is_true(env.stats.wall_ms >= 45 and env.stats.wall_ms < 140, env.stats.wall_ms)
  end)

  it("with mixed failures runs every branch to its end, then raises the first failure "
    .. "with err.index", function()
    local r, env = result([[
      local ok, e = pcall(parallel,
        function() return tools.fx.nap{ms = 30, tag = "a"}.tag end,
        function()
          tools.fx.put{key = "mix.b", value = 1, ms = 5}
          error({code = "mine", message = "b"})
        end,
        function() tools.fx.fail{code = "tool.denied", message = "c", ms = 1} end,
        function() return tools.fx.put{key = "mix.d", value = 1, ms = 40}.stored end)
      return {ok = ok, code = e.code, message = e.message, index = e.index,
              keys = tools.fx.keys{prefix = "mix."}.keys}
    ]])
    assert.same({ ok = false, code = "mine", message = "b", index = 2,
                  keys = { "mix.b", "mix.d" } }, r)
    assert.same({ "[fx.nap] start\ta", "[fx.nap] end\ta" }, env.logs)
    local seen = {}
    for _, c in ipairs(env.calls) do seen[#seen + 1] = outcome(c) end
    assert.same({ "fx.nap=true", "fx.put=true", "fx.fail=tool.denied", "fx.put=true",
                  "fx.keys=true" }, seen)
  end)

  it("a failing tool call in a branch is raised as the tool's error object, with index", function()
    local r = result([[
      local ok, e = pcall(parallel, function() return 1 end,
        function() return tools.fx.fail{code = "tool.denied", message = "no", ms = 2} end)
      return {ok, e.code, e.tool, e.index, tostring(e)}
    ]])
    assert.same({ false, "tool.denied", "fx.fail", 2,
      "tool.denied: tools.fx.fail was denied: no" }, r)
  end)

  it("nests: branches that are themselves parallel", function()
    local r = result([[
      return {parallel(
        function() return parallel(function() return tools.fx.nap{ms = 5}.ms end,
                                   function() return 2 end) end,
        function() return select(2, parallel(function() return 3 end,
                                             function() return tools.fx.nap{ms = 1}.ms end)) end)}
    ]])
    assert.same({ 5, 1 }, r)
  end)

  it("with zero functions returns nothing", function()
    assert.equal(0, result([[return select("#", parallel())]]))
  end)

  it("keeps a nil result in place (the count of results is the count of functions)", function()
    assert.same({ 3, true }, result([[
      local a, b, c = parallel(function() end, function() return nil end, function() return 1 end)
      return {select("#", parallel(function() end, function() end, function() end)),
              a == nil and b == nil and c == 1}
    ]]))
  end)

  it("refuses a non-function argument", function()
    local env = run([[parallel(function() end, 2)]])
    assert.is_false(env.ok)
    assert.equal("bad argument #2 to 'parallel' (function expected, got number)", env.error.message)
  end)
end)

describe("a failed call's error object", function()
  it("has code, message, tool and tostring(err) == code .. ': ' .. message", function()
    local r = result([[
      local ok, e = pcall(tools.fx.fail, {code = "tool.denied", message = "nope"})
      return {e.code, e.message, e.tool, tostring(e) == e.code .. ": " .. e.message,
              getmetatable(e)}
    ]])
    assert.same({ "tool.denied", "tools.fx.fail was denied: nope", "fx.fail", true,
      "tool error" }, r)
  end)

  it("uncaught, gives the envelope its code and the calling line", function()
    local env = run("local a = 1\n\n"
      .. "local b = tools.fx.fail{code = 'tool.denied', message = 'x'}\nreturn b")
    assert.is_false(env.ok)
    assert.equal("tool.denied", env.error.code)
    assert.equal("tools.fx.fail was denied: x", env.error.message)
    assert.equal(3, env.error.line)
    assert.equal(3, env.calls[1].line)
  end)

  it("tool.unknown names the closest tools", function()
    local r = result([[
      local out = {}
      for _, n in ipairs{"weather.curent", "wether.current", "zzzzzzzzzzzzzzzzzzzz"} do
        local ok, e = pcall(function() return tools[n]{} end)
        out[#out + 1] = e.code .. "|" .. e.tool .. "|" .. e.message
      end
      return out
    ]])
    assert.same({
      "tool.unknown|weather.curent|there is no tool tools.weather.curent; did you mean "
        .. "tools.weather.current, tools.weather.forecast? (tools.list() lists them all)",
      "tool.unknown|wether.current|there is no tool tools.wether.current; did you mean "
        .. "tools.weather.current? (tools.list() lists them all)",
      "tool.unknown|zzzzzzzzzzzzzzzzzzzz|there is no tool tools.zzzzzzzzzzzzzzzzzzzz "
        .. "(tools.list() lists the tools there are)",
    }, r)
  end)

  it("calling with ':' says to call it with a dot", function()
    local r = result([[
      local ok, e = pcall(function() return tools.fx:echo{a = 1} end)
      return {ok, e}
    ]])
    assert.same({ false,
      "tools.fx.echo: called with ':' — call it with a dot: tools.fx.echo{...}" }, r)
  end)

  it("arguments that are not a table of named fields are tool.invalid_input", function()
    local r = result([[
      local out = {}
      for _, a in ipairs{"s", 1, true, {1, 2}} do
        local ok, e = pcall(tools.fx.echo, a)
        out[#out + 1] = e.code .. "|" .. e.message
      end
      return out
    ]])
    local pre = "tool.invalid_input|tools.fx.echo: the arguments must be a table of named fields, "
      .. "e.g. tools.fx.echo{key = value}, not a "
    assert.same({ pre .. "string", pre .. "number", pre .. "boolean", pre .. "list" }, r)
  end)

  it("arguments JSON cannot hold are tool.invalid_input with the JSON path", function()
    local r = result([[
      local cyc = {} cyc.self = cyc
      local out = {}
      for _, a in ipairs{{a = {b = {1, 2, print}}}, {c = cyc}, {n = 0/0}, {s = "ok\xff"}} do
        local ok, e = pcall(tools.fx.echo, a)
        out[#out + 1] = e.code .. "|" .. e.message
      end
      return out
    ]])
    local pre = "tool.invalid_input|tools.fx.echo: the arguments cannot be sent as JSON: "
    assert.equal(pre .. "cannot convert a function at $.a.b[2] to JSON; JSON has only null, "
      .. "booleans, numbers, strings, arrays and objects: remove the field, or store the "
      .. "result of calling the function", r[1])
    assert.equal(pre .. "cycle at $.c.self: the table contains itself; copy the data "
      .. "instead of storing a reference to an enclosing table", r[2])
    assert.equal(pre .. "NaN cannot be represented in JSON (at $.n); use json.null, or a "
      .. "string such as \"NaN\"", r[3])
    assert.equal(pre .. "invalid UTF-8 in the string at $.s (byte 2: byte that never appears "
      .. "in UTF-8); JSON strings must be UTF-8 text: encode binary data first, e.g. as hex", r[4])
  end)
end)

describe("schema validation", function()
  local function strict(args_src)
    local r = result("local ok, e = pcall(tools.fx.strict, " .. args_src .. ") "
      .. "return ok and 'ok' or e.code .. '|' .. e.message")
    return r
  end
  local function bad(detail)
    return "tool.invalid_input|tools.fx.strict: invalid arguments: " .. detail
      .. " (tools.describe(\"fx.strict\") shows what it takes)"
  end

  it("reports a missing required property at $", function()
    assert.equal(bad('$: missing required property "name"'), strict("{}"))
  end)

  it("reports a wrong type with what it got", function()
    assert.equal(bad("$.name: expected string, got integer 5"), strict("{name = 5}"))
    assert.equal(bad("$.count: expected integer, got number 1.5"),
      strict("{name = 'abc', count = 1.5}"))
  end)

  it("reports minLength, pattern and enum", function()
    assert.equal(bad("$.name: expected at least 3 characters, got 2"), strict("{name = 'ab'}"))
    assert.equal(bad('$.name: expected a string matching /^[a-z]+$/, got "ABC"'),
      strict("{name = 'ABC'}"))
    assert.equal(bad('$.color: expected one of "red", "green", "blue"; got "pink"'),
      strict("{name = 'abc', color = 'pink'}"))
  end)

  it("reports a nested object's field and an array item by JSON path (0-based)", function()
    assert.equal(bad('$.owner.id: expected integer, got string "x"'),
      strict("{name = 'abc', owner = {id = 'x'}}"))
    assert.equal(bad("$.items[2].name: expected string, got integer 5"),
      strict("{name = 'abc', items = {{name = 'a'}, {name = 'b'}, {name = 5}}}"))
  end)

  it("asserts formats of inputs: email, date-time, uuid", function()
    assert.equal(bad('$.email: expected a valid email, got "not-an-email"'),
      strict("{name = 'abc', email = 'not-an-email'}"))
    assert.equal(bad('$.when: expected a valid date-time, got "2024-13-01T00:00:00Z"'),
      strict("{name = 'abc', when = '2024-13-01T00:00:00Z'}"))
    assert.equal(bad('$.uuid: expected a valid uuid, got "1234"'),
      strict("{name = 'abc', uuid = '1234'}"))
    assert.equal("ok", strict("{name = 'abc', email = 'a@b.co', when = '2024-01-02T03:04:05Z', "
      .. "uuid = '123e4567-e89b-12d3-a456-426614174000'}"))
  end)

  it("a handler's result that breaks the output schema is tool.invalid_output", function()
    local r = result([[
      local out = {}
      for _, a in ipairs{{ret = {n = 1}}, {ret = {n = "x"}}, {ret = {}}} do
        local ok, e = pcall(tools.fx.shaped, a)
        out[#out + 1] = ok and "ok" or e.code .. "|" .. e.message
      end
      return out
    ]])
    local pre = "tool.invalid_output|tools.fx.shaped returned a result that does not match its "
      .. "output schema: "
    local post = " (a fault of the tool, not the script)"
    assert.same({ "ok", pre .. '$.n: expected integer, got string "x"' .. post,
                  pre .. '$: missing required property "n"' .. post }, r)
  end)

  it("a call refused by its schema is listed in calls, and its handler never ran", function()
    local _, env = result([[
      pcall(tools.fx.put, {key = "schema.x"})
      return tools.fx.keys{prefix = "schema."}
    ]])
    assert.equal("tool.invalid_input", env.calls[1].error)
    assert.same({ keys = {} }, env.result)
  end)
end)

describe("values round-trip exactly through an echo tool", function()
  local function echo(expr)
    return result("local v = " .. expr .. " local r = tools.fx.echo{v = v}.v "
      .. "return {r == v, math.type(r) or type(r), math.type(v) or type(v)}")
  end

  it("64-bit integers at both ends, and 2^53 + 1", function()
    assert.same({ true, "integer", "integer" }, echo("math.mininteger"))
    assert.same({ true, "integer", "integer" }, echo("math.maxinteger"))
    assert.same({ true, "integer", "integer" }, echo("9007199254740993"))
  end)

  it("1.0 stays a float, -0.0 keeps its sign, 0.1 and 5e-324 exactly", function()
    assert.same({ true, "float", "float" }, echo("1.0"))
    assert.same({ "float", "-inf" },
      result("local z = tools.fx.echo{v = -0.0}.v return {math.type(z), tostring(1 / z)}"))
    assert.same({ true, "float", "float" }, echo("0.1"))
    assert.same({ true, "float", "float" }, echo("5e-324"))
  end)

  it("strings with NUL bytes, and unicode", function()
    assert.same({ true, 4 },
      result([[local r = tools.fx.echo{v = "a\0b\0"}.v return {r == "a\0b\0", #r}]]))
    assert.same({ true, "string", "string" }, echo([["héllo 世界 🌊 \u{10FFFF}"]]))
  end)

  it("json.array({}) stays [], {} stays {}, json.null stays json.null", function()
    assert.same({ "[]", "{}", true, true }, result([[
      local a = tools.fx.echo{v = json.array({})}.v
      local o = tools.fx.echo{v = {}}.v
      return {json.encode(a), json.encode(o), tools.fx.echo{v = json.null}.v == json.null,
              tools.fx.echo_value{v = json.null} == json.null}
    ]]))
  end)

  it("nested arrays and objects", function()
    assert.equal('{"a":[1,{"b":{}},[],[[2.5]]],"c":{"d":{"e":"f","n":null}}}', result([[
      return json.encode(tools.fx.echo{v = {a = {1, {b = {}}, json.array({}), {{2.5}}},
                                            c = {d = {e = "f", n = json.null}}}}.v)
    ]]))
  end)
end)

describe("tool limits", function()
  it("limit.tool_calls is fatal even inside pcall, and the calls made are listed", function()
    local env = run([[
      local n = 0
      for i = 1, 5 do pcall(tools.fx.echo, {i = i}) n = n + 1 end
      return n
    ]], { tool_calls = 3 })
    assert.is_false(env.ok)
    assert.equal("limit.tool_calls", env.error.code)
    assert.equal("the script made more than its limit of 3 tool calls", env.error.message)
    assert.equal(4, #env.calls)
    assert.equal("limit.tool_calls", env.calls[4].error)
    for i = 1, 3 do assert.is_true(env.calls[i].ok) end
  end)

  it("the per-tool limit counts each tool on its own", function()
    local env = run([[
      tools.fx.echo{} tools.fx.big{n = 1} tools.fx.echo{} tools.fx.big{n = 1}
      pcall(tools.fx.echo, {})
      return "not reached"
    ]], { tool_calls_per_tool = 2 })
    assert.is_false(env.ok)
    assert.equal("limit.tool_calls", env.error.code)
    assert.equal("the script called tools.fx.echo more than its limit of 2 calls of one tool",
      env.error.message)
    assert.equal(5, #env.calls)
    assert.equal("limit.tool_calls", env.calls[5].error)
    assert.equal("fx.echo", env.calls[5].tool)
  end)

  it("tool_in_flight: calls beyond it wait their turn and all complete", function()
    local r, env = result([[
      local fs = {}
      for i = 1, 5 do fs[i] = function() return tools.fx.nap{ms = 30, tag = tostring(i)}.tag end end
      return {parallel(table.unpack(fs))}
    ]], { tool_in_flight = 2 })
    assert.same({ "1", "2", "3", "4", "5" }, r)
    local running, most = 0, 0
    for _, line in ipairs(env.logs) do
      running = running + (line:match("%] start") and 1 or -1)
      if running > most then most = running end
    end
    assert.equal(2, most)
    assert.equal(10, #env.logs)
    assert.is_true(env.stats.wall_ms >= 85, env.stats.wall_ms)   -- three rounds of 30 ms
  end)

  it("a result over tool_bytes is tool.invalid_output; arguments over it, tool.invalid_input",
    function()
    local r = result([[
      local a = tools.fx.big{n = 80}
      local ok, e = pcall(tools.fx.big, {n = 100})
      local ok2, e2 = pcall(tools.fx.echo, {s = string.rep("y", 200)})
      return {#a.s, ok, e.code, ok2, e2.code}
    ]], { tool_bytes = 100 })
    assert.same({ 80, false, "tool.invalid_output", false, "tool.invalid_input" }, r)
  end)

  it("tool_timeout bounds a call; the run goes on", function()
    local r, env = result([[
      local ok, e = pcall(tools.fx.nap, {ms = 1000})
      return {ok, e.code, e.message}
    ]], { tool_timeout = "50ms" })
    assert.same({ false, "tool.timeout",
                  "tools.fx.nap timed out after 50ms (the tool_timeout limit, --tool-timeout)" }, r)
    assert.is_true(env.calls[1].ms < 500, env.calls[1].ms)
  end)
end)

describe("the envelope's calls", function()
  it("lists every call with tool, ok, error, ms, bytes_in, bytes_out and line", function()
    local env = run([[
      tools.fx.echo{a = 1}
      pcall(tools.fx.fail, {code = "tool.denied", message = "x"})
      return "done"
    ]])
    assert.is_true(env.ok)
    assert.equal(2, #env.calls)
    local a, b = env.calls[1], env.calls[2]
    assert.same({ "fx.echo", true, 7, 7, 1 }, { a.tool, a.ok, a.bytes_in, a.bytes_out, a.line })
    assert.is_nil(a.error)
    assert.same({ "fx.fail", false, "tool.denied", 2 }, { b.tool, b.ok, b.error, b.line })
    assert.equal(#'{"code":"tool.denied","message":"x"}', b.bytes_in)
    assert.equal(0, b.bytes_out)
    for _, c in ipairs(env.calls) do
      assert.is_true(type(c.ms) == "number" and c.ms >= 0 and c.ms < 1000)
    end
  end)

  it("lists calls still pending as cancelled when the run ends by a limit", function()
    local env = run([[
      tools.fx.put{key = "late.a", value = 1}
      return parallel(function() return tools.fx.nap{ms = 2000} end,
                      function() return tools.fx.echo{x = 1} end)
    ]], { timeout = "100ms" })
    assert.is_false(env.ok)
    assert.equal("limit.time", env.error.code)
    local seen = {}
    for _, c in ipairs(env.calls) do seen[#seen + 1] = outcome(c) end
    assert.same({ "fx.put=true", "fx.nap=cancelled", "fx.echo=true" }, seen)
    assert.is_true(env.calls[2].ms >= 80, env.calls[2].ms)
  end)

  it("lists calls still pending as cancelled when the run ends by an error", function()
    local env = run([[
      -- the call starts inside the coroutine, which gsub then cannot let wait
      pcall(string.gsub, "a", "a",
        coroutine.wrap(function() return tools.fx.nap{ms = 500, tag = "w"}.tag end))
      tools.fx.echo{}
      error("stop here")
    ]])
    assert.is_false(env.ok)
    assert.equal("runtime", env.error.code)
    assert.equal("fx.nap", env.calls[1].tool)
    assert.equal("cancelled", env.calls[1].error)
    assert.is_true(env.calls[2].ok)
    assert.equal("stop here", env.error.message)
    assert.same({ "[fx.nap] start\tw" }, env.logs)
  end)

  it("lists the calls made before limit.tool_calls ended a parallel, cancelling the rest",
    function()
    local env = run([[
      return parallel(function() return tools.fx.nap{ms = 2000} end,
                      function() tools.fx.echo{} return tools.fx.echo{x = 1} end)
    ]], { tool_calls = 2 })
    assert.equal("limit.tool_calls", env.error.code)
    local seen = {}
    for _, c in ipairs(env.calls) do seen[#seen + 1] = outcome(c) end
    assert.same({ "fx.nap=cancelled", "fx.echo=true", "fx.echo=limit.tool_calls" }, seen)
  end)

  it("cannot be forged by the script", function()
    local env = run([[
      print('"calls":[{"tool":"forged","ok":true}]')
      local ok = pcall(rawset, tools, "calls", {})
      return {calls = {{tool = "forged", ok = true}}, rawset_ok = ok}
    ]])
    assert.is_true(env.ok)
    assert.same({}, env.calls)
    assert.same({ { tool = "forged", ok = true } }, env.result.calls)
    assert.is_false(env.result.rawset_ok)
  end)
end)

describe("calls refused before they start", function()
  it("are listed in the envelope's calls like any other", function()
    local env = run([[
      local a = pcall(tools.fx.echo, "text")
      local b = pcall(tools.fx.echo, { f = function() end })
      return { a, b }
    ]])
    assert.is_true(env.ok)
    assert.equal(2, #env.calls)
    for i = 1, 2 do
      assert.equal("fx.echo", env.calls[i].tool)
      assert.equal("tool.invalid_input", env.calls[i].error)
      assert.equal(i, env.calls[i].line)
    end
  end)
end)
