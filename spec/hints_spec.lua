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

describe("the mistakes that remain: each names the fix", function()
  local function full(src, opts)
    opts = opts or {}
    opts.tools = { DIR }
    return tidepool.run(src, opts)
  end

  local syntax = {
    { "try {\n  local r = tools.shapes.echo{}\n} catch (e) {\n  print(e)\n}", 2,
      "unexpected symbol near 'local'",
      "Lua has no try/catch: local ok, err = pcall(function() ... end)." },
    { "local x = 1\nif x == 1 then\n  x = 2\nelse if x == 3 then\n  x = 4\nend\nreturn x", 7,
      "'end' expected (to close 'if' at line 2) near <eof>", "Line 4 has `else if`: Lua writes "
      .. "elseif as one word (if a then ... elseif b then ... else ... end); `else if` opens a "
      .. "second if that needs its own end. Write elseif there rather than adding an end." },
    { "for i = 1, 3 do\n  if i == 2 then continue end\nend", 2, "syntax error near 'end'",
      "Lua has no continue: put a label before the loop's end and jump to it (if skip then "
      .. "goto continue end ... ::continue:: end), or wrap the rest of the body in if not skip "
      .. "then ... end." },
    { "local a\nlocal b = a ?? 1", 2, "unexpected symbol near '?'",
      "Lua has no ??: write a or b (b when a is nil or false)." },
    { "local a\nlocal b = a?.name", 2, "unexpected symbol near '?'",
      "Lua has no ?.: write a and a.b (nil when a is nil)." },
    { "local c = true\nlocal b = c ? 1 : 2", 2, "unexpected symbol near '?'",
      "Lua has no ? : operator: write cond and a or b (when a is never false or nil), or an "
      .. "if statement." },
    { "local t = {}\nif !t then end", 2, "unexpected symbol near '!'",
      "Lua writes not-equal as ~= and negation as not: if a ~= b then, if not ok then." },
  }
  for _, c in ipairs(syntax) do
    it(c[1]:gsub("\n", " | "), function()
      assert.same({ "syntax", c[3], c[4], c[2] }, err(c[1]))
    end)
  end

  local runtime = {
    { "local t = {{name = 'a'}}\nreturn t[0].name", 2,
      "attempt to index a nil value (field 'integer index')", "Lua arrays start at 1: the "
      .. "first item is t[1], and t[0] is nil; loop with for i = 1, #t do (or for i, v in "
      .. "ipairs(t) do)." },
    { "local s = ' a '\nreturn s:trim()", 2, "attempt to call a nil value (method 'trim')",
      "Lua has no :trim(): trim a string with s:match(\"^%s*(.-)%s*$\")." },
    { "local arr = {}\narr:append(1)", 2, "attempt to call a nil value (method 'append')",
      "Lua has no :append(): append to an array with table.insert(t, v) or t[#t + 1] = v." },
    { "local s = 'a,b'\nreturn s:split(',')", 2, "attempt to call a nil value (method 'split')",
      "Lua has no :split(): split a string with gmatch: for part in s:gmatch(\"[^,]+\") do "
      .. "... end." },
    { "for k, v in {a = 1} do end", 1,
      "attempt to call a table value (for iterator 'for iterator')", "A for loop walks a "
      .. "table through an iterator: for k, v in pairs(t) do (every key) or for i, v in "
      .. "ipairs(t) do (items 1..n), not for k, v in t do." },
    { "local t = {5, 3, 1, 2, 4, 9, 8, 7, 6, 10, 11, 12}\n"
      .. "table.sort(t, function(a, b) return a - b end)", 2,
      "invalid order function for sorting", "A sort comparator returns a boolean, true when "
      .. "a goes first: table.sort(t, function(a, b) return a < b end); a - b is a number, and "
      .. "every number is true in Lua." },
    { "local r = tools.shapes.echo{}\nreturn r.content[1].text", 2,
      "attempt to index a nil value (field 'content')", "tidepool hands over a tool's result "
      .. "already unwrapped: JSON text is a table already, other text a string; there is no "
      .. "r.content[1].text: read the fields directly (print(json.encode(r)) shows them)." },
  }
  for _, c in ipairs(runtime) do
    it(c[1]:gsub("\n", " | "), function()
      assert.same({ "runtime", c[3], c[4], c[2] }, err(c[1]))
    end)
  end

  it("pcall(tools.x.y{...}) shows both forms side by side", function()
    assert.same({ "tool.invalid_input", "tools.shapes.echo: invalid arguments: $.tags: "
      .. "expected array, got string \"x\" (tools.describe(\"shapes.echo\") shows what it takes)",
      "pcall(tools.shapes.echo{...}) calls the tool first, before pcall runs, so its error is "
      .. "not caught. Give pcall the function and its arguments apart: write local ok, r = "
      .. "pcall(tools.shapes.echo, {...}), not pcall(tools.shapes.echo{...}).", 1 },
      err("local ok, r = pcall(tools.shapes.echo{tags = 'x'})"))
  end)

  it("positional arguments get the tool's own field names", function()
    local e = err("return tools.shapes.echo('x')")
    assert.same({ "tool.invalid_input", "tools.shapes.echo: the arguments must be a table "
      .. "of named fields, not a string: tools.shapes.echo{either = ..., loose = ..., map = "
      .. "{...}, meta = {...}}" }, { e[1], e[2] })
  end)

  it("json.null where a value is expected offers json.null first, then nil", function()
    assert.same({ "tool.invalid_input", "tools.shapes.echo: invalid arguments: $.tags: "
      .. "expected array, got null (json.null): give a value of that type, or nil to leave "
      .. "the field out (tools.describe(\"shapes.echo\") shows what it takes)" },
      { table.unpack(err("return tools.shapes.echo{tags = json.null}"), 1, 2) })
  end)

  it("a loop that never advances says the last calls were identical", function()
    local e = err("repeat\n  local r = tools.shapes.echo{meta = {page = 1}}\nuntil false",
      { tool_calls = 20 })
    assert.same({ "limit.tool_calls", "the script made more than its limit of 20 tool calls; "
      .. "the last 20 calls were all tools.shapes.echo with the same arguments: the loop does "
      .. "not advance (pass on the next page's cursor, or stop when an answer repeats)", 2 },
      { e[1], e[2], e[4] })
  end)

  it("warns, and still runs, on legal Lua that most likely answers wrong", function()
    local env = full([[
local t = {3, 1, 2}
table.sort(t, function(a, b) return a < b end)
local r = tools.shapes.echo{meta = {name = "x"}}
local n = 0
for _ in ipairs(r.meta) do n = n + 1 end
local len = t.length
local s = string.format("%s", r.meta)
local function cmp(a, b) return a - b end
return {n, len == nil, s}]])
    assert.is_true(env.ok)
    assert.same({
      { line = 6, message = "t.length is nil unless the table has a field named length: "
        .. "Lua's length of an array or a string is #t" },
      { line = 8, message = "a function(a, b) that returns a - b is a JavaScript sort "
        .. "comparator: Lua's table.sort wants a boolean (and every number is true): return "
        .. "a < b" },
      { line = 5, message = "ipairs over a table with string keys (an object) visits "
        .. "nothing: ipairs walks items 1..n; use pairs(t) for its keys and values" },
      { line = 7, message = "string.format's %s of a table shows only \"table: N\", not what "
        .. "it holds: use json.encode(t) to show its contents" },
    }, env.warnings)
  end)

  it("warns that kv.get's missing key is json.null, not nil", function()
    local env = tidepool.run("local r = tools.kv.get{key = 'precheck-none'}\n"
      .. "if r.value == nil then return 'missing' end\nreturn 'present'")
    assert.same({ { line = 2, message = "tools.kv.get answers value = json.null, not nil, for "
      .. "a key that is not set, so r.value == nil is never true there: test r.found (or "
      .. "r.value == json.null)" } }, env.warnings)
  end)

  it("no warnings field when there is nothing to say", function()
    assert.is_nil(full("local t = {1, 2} for _, v in ipairs(t) do end return #t").warnings)
  end)
  local OBJLEN = "#t is 0 here because t came from a JSON object (a tool's result or "
    .. "json.decode): it has keys, not a list of items; walk it with for k, v in pairs(t) do "
    .. "... end, and test for empty with next(t) == nil"

  it("warns at #t of a table that came from a JSON object, and #t stays 0", function()
    local env = full("local r = tools.shapes.echo{meta = {name = 'x'}}\nlocal n = #r.meta\n"
      .. "local d = json.decode('{\"a\": 1}')\nlocal m = 0\nfor i = 1, #d do m = m + 1 end\n"
      .. "return {n, m}")
    assert.is_true(env.ok)
    assert.same({ 0, 0 }, env.result)
    assert.same({ { line = 2, message = OBJLEN }, { line = 5, message = OBJLEN } }, env.warnings)
  end)

  it("no #t warning for arrays, empty objects, objects given items, or plain tables", function()
    local env = full([[
local r = tools.shapes.echo{meta = {name = "x"}, tags = {"a", "b"}}
local e = json.decode('{}')
local o = json.decode('{"k": 1}')
o[1] = "first"
local p = {name = "x"}
return {#r.tags, #e, #o, #p, #json.decode('[1, 2, 3]')}]])
    assert.is_true(env.ok)
    assert.same({ 2, 0, 1, 0, 3 }, env.result)
    assert.is_nil(env.warnings)
  end)

  it("a decoded object is still a plain table: keys added, metatable replaced", function()
    assert.same({ '{"a":1}', '{"a":1,"b":2}', 5, "json.object" }, result([[
local e = json.decode('{}')
e.a = 1
local o = json.decode('{"a": 1}')
o.b = 2
local t = setmetatable(json.decode('{"a": 1}'), {__index = function() return 5 end})
return {json.encode(e), json.encode(o), t.zz, getmetatable(json.decode('{"a": 1}'))}]]))
  end)

  local ARRLEN = "t.length is nil: t is a list from JSON (a tool's result or json.decode) and "
    .. "Lua lists have no length field; the number of items is #t (for i = 1, #t do ... end)"

  it("t.length of a list from JSON warns when it runs, in place of the pre-run guess", function()
    local env = full([[
local r = tools.shapes.echo{tags = {"a", "b"}}
local n = r.tags.length
local d = json.decode('[1, 2, 3]')
local seen = 0
for i = 1, 3 do if d.length == nil then seen = seen + 1 end end
return {n == nil, seen, #r.tags, d[4] == nil}]])
    assert.is_true(env.ok)
    assert.same({ true, 3, 2, true }, env.result)
    assert.same({ { line = 2, message = ARRLEN }, { line = 5, message = ARRLEN } }, env.warnings)
  end)

  it("a list's other missing keys read nil without a warning", function()
    local env = full([[
local d = json.decode('[1, 2]')
local n = 0
for _ in ipairs(d) do n = n + 1 end
local i = 1
while d[i] ~= nil do i = i + 1 end
return {n, i, d[0] == nil, d.items == nil}]])
    assert.same({ 2, 3, true, true }, env.result)
    assert.is_nil(env.warnings)
  end)

  describe("JSON text used as a table names the value, the tool and json.decode", function()
    local T = "local r = tools.fixture.text{}\n"
    local FROM = " is a string holding JSON text (the result of tools.fixture.text), not a "
      .. "table: decode it first: local t = json.decode("
    local cases = {
      { T .. "return r.items[1]", "attempt to index a nil value (field 'items')",
        "`r`" .. FROM .. "r), then use t.items." },
      { T .. "return #r.items", "attempt to get length of a nil value (field 'items')",
        "`r`" .. FROM .. "r), then use t.items." },
      { T .. "r.seen = true", "attempt to index a string value (local 'r')",
        "`r`" .. FROM .. "r), then use t.seen." },
      { T .. "for k in pairs(r) do end", "bad argument #1 to 'for iterator' (table expected, "
        .. "got string)", "`r`" .. FROM .. "r)." },
      { "local res = {body = tools.fixture.text{}}\nreturn res.body.page.next",
        "attempt to index a nil value (field 'page')", "`res.body`" .. FROM
        .. "res.body), then use t.page." },
      { "Text = tools.fixture.text{}\nlocal function first() return Text.items[1] end\n"
        .. "return first()", "attempt to index a nil value (field 'items')",
        "`Text`" .. FROM .. "Text), then use t.items.", 2 },
      { "local s = '[{\"id\": 1}]'\nreturn s.id.x", "attempt to index a nil value (field 'id')",
        "`s` is a string holding JSON text, not a table: decode it first: local t = "
        .. "json.decode(s), then use t.id." },
    }
    for i, c in ipairs(cases) do
      it("case " .. i, function()
        assert.same({ "runtime", c[2], c[3], c[4] or 2 }, err(c[1]))
      end)
    end

    it("other strings keep the nil hint", function()
      assert.same({ "runtime", "attempt to index a nil value (field 'a')", "A value is nil "
        .. "where a table was expected: check the variable's name and print what the tool or "
        .. "expression actually returned.", 2 }, err("local s = 'hello'\nreturn s.a.b"))
    end)
  end)
end)
