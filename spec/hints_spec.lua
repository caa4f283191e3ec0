-- The mistakes models make, one class each, with the exact message and hint the model
-- gets back (engine/core/run.c: runtime_hint, syntax_hint, tool_hint; sandbox.c: foreign
-- names; engine/lib/json.c: json.null in messages; engine/host/admit.c: empty tables as arrays).
local tidepool = require("tidepool")

local DIR = "spec/fixtures/hints"

local HINT_LUA = "Scripts are Lua 5.4, not JavaScript or Python: write it the way the message says."
local HINT_NULL = "json.null is JSON's null: it is truthy and not nil; test it with "
  .. "`v == json.null`."
local HINT_METHOD = "Call methods with `:` (s:upper(), obj:method()): it passes the value "
  .. "itself as the first argument (self); a `.` call does not."
local HINT_STRING_ARITH = "Arithmetic works on numbers only: join strings with `..` "
  .. "(\"a\" .. 1); use tonumber(s) only when the string holds a number."

-- The error of src as {code, message, hint, line}.
local function err(src, opts)
  opts = opts or {}
  opts.tools = { DIR }
  local env = tidepool.run(src, opts)
  assert(not env.ok, "the script was expected to fail")
  local e = env.error
  return { e.code, e.message, e.hint, e.line }
end

local function result(src)
  local env = tidepool.run(src, { tools = { DIR } })
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message))
  return env.result
end

describe("a foreign name read as a global", function()
  local cases = {
    { "local r = {}\nif r.value == null then return 1 end", 2,
      "`null` is not Lua: use nil (or json.null for a JSON null)" },
    { "return None", 1, "`None` is not Lua: use nil (or json.null for a JSON null)" },
    { "return undefined", 1, "`undefined` is not Lua: use nil" },
    { "local ok = True", 1, "`True` is not Lua: use true" },
    { "local ok = False", 1, "`False` is not Lua: use false" },
    { "local x = 1\nlocal r = await tools.shapes.echo{}", 2, "`await` is not Lua: a tool call "
      .. "returns its result directly (local r = tools.x.y{...}); run several at once with "
      .. "parallel(f1, f2, ...)" },
    { "console.log('hi')", 1, "`console` is not Lua: use print(...) for logs" },
    { "return len({1, 2})", 1, "`len` is not Lua: use #t for the length of an array or a string" },
    { "local M = {}\nfunction M.get() return self.x end\nreturn M.get()", 2,
      "`self` is only set inside a function defined with `:` (function obj:name() ... end) "
      .. "and called with `:` (obj:name())" },
    { "return this.x", 1, "`this` is not Lua: a function defined with `:` (function "
      .. "obj:name() ... end) gets its object as self" },
    { "return JSON.stringify({})", 1, "`JSON` is not Lua: use json.encode(v) and json.decode(s)" },
    { "return Math.floor(1.5)", 1, "`Math` is not Lua: use math (lowercase): math.floor, "
      .. "math.max, math.random" },
    { "local n = 3\nreturn f\"n is {n}\"", 2, "`f` is not defined: if it is a Python f-string, "
      .. "Lua has none: use string.format(\"%s\", x) or join with .." },
    { "try {\n  tools.shapes.echo{}\n}", 1, "`try` is not Lua: catch errors with local ok, "
      .. "err = pcall(function() ... end)" },
  }
  for _, c in ipairs(cases) do
    it("raises at that line: " .. c[3]:match("^`[^`]+`"), function()
      local hint = c[3]:find("^`self`") and HINT_METHOD or HINT_LUA
      assert.same({ "runtime", c[3], hint, c[2] }, err(c[1]))
    end)
  end

  it("keeps Lua's meaning for a name the script assigns, rawget and other absent names", function()
    assert.same({ 5, true, true, true, "json.null" }, result([[
      null = 5
      local a = null
      local function f() return None end
      local ok = not pcall(f)
      return { a, ok, rawget(_G, "None") == nil, nothing_here == nil,
               getmetatable(json.null) }]]))
  end)

  it("keeps Lua's meaning inside a custom _ENV", function()
    assert.same({ true }, result([[
      local function g()
        local _ENV = { }
        return null == nil
      end
      return { g() }]]))
  end)

  it("names the fix in an error object a script catches", function()
    assert.same({ false, "`None` is not Lua: use nil (or json.null for a JSON null)" },
      result([[local ok, e = pcall(function() return None end)
               return { ok, (e:gsub("^script:%d+: ", "")) }]]))
  end)
end)

describe("json.null in messages", function()
  local cases = {
    { "local v = json.decode('{\"a\":null}').a\nreturn v.name", "attempt to index json.null "
      .. "(JSON null) with key 'name'" },
    { "return json.null .. 'x'", "attempt to concatenate json.null (JSON null)" },
    { "return 'x' .. json.null", "attempt to concatenate json.null (JSON null)" },
    { "return json.null + 1", "attempt to perform arithmetic on json.null (JSON null)" },
    { "return #json.null", "attempt to get length of json.null (JSON null)" },
    { "return json.null < 1", "attempt to compare json.null with number" },
    { "json.null.x = 1", "attempt to set key 'x' of json.null (JSON null)" },
    { "return json.null()", "attempt to call json.null (JSON null)" },
    { "for k in pairs(json.null) do end", "bad argument #1 to 'for iterator' (table "
      .. "expected, got json.null)" },
  }
  for _, c in ipairs(cases) do
    it(c[2], function()
      local e = err(c[1])
      assert.same({ "runtime", c[2], HINT_NULL }, { e[1], e[2], e[3] })
    end)
  end

  it("is named when it comes from a tool's result before the script reads json.null", function()
    assert.same({ "runtime", "attempt to concatenate json.null (JSON null)", HINT_NULL, 2 },
      err("local r = tools.fixture.nulls{}\nreturn 'v: ' .. r.v"))
  end)

  it("still compares equal to itself and prints as null", function()
    assert.same({ true, "null", true, "userdata" }, result(
      "return { json.decode('null') == json.null, tostring(json.null), json.null ~= nil, "
      .. "type(json.null) }"))
  end)
end)

describe("hints chosen by cause", function()
  it("string arithmetic: join with ..", function()
    assert.same({ "runtime", "attempt to add a 'string' with a 'number'", HINT_STRING_ARITH, 1 },
      err("return 'total: ' + 1"))
  end)

  it("%d with a float: %s or math.floor", function()
    assert.same({ "runtime", "bad argument #2 to 'format' (number has no integer "
      .. "representation)", "%d needs a whole number: use %s, %.2f, or %d with math.floor(x).",
      1 }, err("return string.format('%d items', 1.5)"))
  end)

  it("a string method called with '.'", function()
    assert.same({ "runtime", "bad argument #1 to 'upper' (string expected, got no value)",
      HINT_METHOD, 1 }, err("local s = 'abc' return s.upper()"))
  end)

  it("a method of the script called with '.'", function()
    assert.same({ "runtime", "attempt to index a nil value (local 'self')", HINT_METHOD, 2 },
      err("local o = {x = 1}\nfunction o:get() return self.x end\nreturn o.get()"))
  end)

  it("// used as a comment after code", function()
    assert.same({ "runtime", "attempt to perform arithmetic on a nil value (global 'half')",
      "`//` is floor division in Lua, not a comment: comments start with `--`.", 1 },
      err("local x = 5 // half\nreturn x"))
  end)

  it("arithmetic on nil", function()
    assert.same({ "runtime", "attempt to perform arithmetic on a nil value (global 'total')",
      "A value used in arithmetic is nil: check the variable's name and print what the tool "
      .. "or expression returned.", 1 }, err("return total + 1"))
  end)
end)

describe("syntax hints keyed on the token and the line", function()
  local cases = {
    { "// fetch\nreturn 1", "unexpected symbol near '//'",
      "Comments start with `--` in Lua (and --[[ ... ]] for a block); `//` is floor division." },
    { "local t = {name: 'x'}", "<name> expected near ''x''", "Table fields use =: {key = "
      .. "value, [\"odd key\"] = 1}, not {key: value}; json.decode(text) reads JSON." },
    { "local f = (x) => x * 2", "unexpected symbol near '='",
      "Lua has no arrow functions: write function(x) return x * 2 end." },
    { "tools.shapes.echo{}.then(function(r) end)", "<name> expected near 'then'",
      "Tool calls return their result directly: no .then and no await; write local r = "
      .. "tools.x.y{...}." },
    { "def f(x):\n  return x", "syntax error near 'f'",
      "Lua functions are written function name(a, b) ... end (no def, no colon)." },
    { "local ok = pcall(print)\ntry:\n  x = 1\nexcept Exception:",
      "function arguments expected near '='",
      "Lua has no try/catch: local ok, err = pcall(function() ... end)." },
    { "if a != b then end", "'then' expected near '!'",
      "Lua writes not-equal as ~= and negation as not: if a ~= b then, if not ok then." },
    { "local x = 1\nx += 1", "syntax error near '+'",
      "Lua has no += or ++: write x = x + 1 (and s = s .. \"more\")." },
    { "local f = function(x) { return x }", "unexpected symbol near '{'",
      "Lua blocks are not in braces: function f(x) ... end, if c then ... end; braces make "
      .. "tables only." },
    { "const x = 1", "syntax error near 'x'",
      "Declare variables with local: local x = 1 (no const, let or var)." },
    { "let x = 1", "syntax error near 'x'",
      "Declare variables with local: local x = 1 (no const, let or var)." },
    { "if a && b then end", "unexpected symbol near '&'",
      "Lua writes && as and, || as or, ! as not." },
    { "if x > 1:\n  y = 1", "'then' expected near ':'", "Blocks are if c then ... end, for i = 1, "
      .. "n do ... end, while c do ... end (no colon, no braces)." },
    { "local x = = 1", "unexpected symbol near '='", "Fix the syntax on that line. Scripts "
      .. "are Lua 5.4: ~= for not-equal, .. to join strings, -- for comments, local for "
      .. "variables, end closes function/if/for/while." },
  }
  for _, c in ipairs(cases) do
    it(c[1]:gsub("\n", " | "), function()
      local e = err(c[1])
      assert.same({ "syntax", c[2], c[3] }, { e[1], e[2], e[3] })
    end)
  end
end)

describe("tool errors say how to fix the call", function()
  it("tool.unknown: check the name", function()
    assert.same({ "tool.unknown", "there is no tool tools.shapes.echoo; did you mean "
      .. "tools.shapes.echo? (tools.list() lists them all)", "Check the tool's name with "
      .. "tools.list() or tools.search(\"words\").", 1 }, err("tools.shapes.echoo{}"))
  end)

  it("tool.invalid_input: fix the arguments at the JSON path", function()
    assert.same({ "tool.invalid_input", "tools.shapes.echo: invalid arguments: $.tags: "
      .. "expected array, got string \"x\" (tools.describe(\"shapes.echo\") shows what it takes)",
      "Fix the arguments: the message gives the JSON path of the wrong value and what was "
      .. "expected; tools.describe(name) shows the schema.", 1 },
      err("tools.shapes.echo{tags = 'x'}"))
  end)
end)

describe("an empty table in tool arguments", function()
  it("is sent as [] where the schema wants an array, and as {} elsewhere", function()
    assert.equal('{"either":[],"loose":{},"map":{"a":[]},"meta":{},"pair":[[],{}],"ref":[],'
      .. '"rows":[{"cells":[]},{}],"tags":[]}', result([[
      return json.encode(tools.shapes.echo{tags = {}, meta = {}, either = {}, loose = {},
        ref = {}, rows = {{cells = {}}, {}}, pair = {{}, {}}, map = {a = {}}})]]))
  end)

  it("reaches the tool as an array", function()
    assert.same({ 0, "json.array" }, result([[
      local r = tools.shapes.echo{tags = {}}
      return { #r.tags, getmetatable(r.tags) }]]))
  end)
end)

describe("a result that cannot be sent as JSON", function()
  it("names the line of the return", function()
    local e = err("local x = 1\nlocal f = function() return 1 end\nreturn {f = f, x = x}")
    assert.same({ "runtime", "the script's return value cannot be sent as JSON: cannot "
      .. "convert a function at $.f to JSON; JSON has only null, booleans, numbers, strings, "
      .. "arrays and objects: remove the field, or store the result of calling the function",
      3 }, { e[1], e[2], e[4] })
  end)

  it("names no line when the script returns from several lines", function()
    local e = err("if false then return 1 end\nreturn {print}")
    assert.is_nil(e[4])
  end)
end)
