-- The pre-run check (engine/core/precheck.c): when a script compiles, before any of it
-- runs, the lines that would surely fail are errors at their line, all of them listed,
-- and nothing runs (no tool call is made). Dynamic access is not checked, a global the
-- script assigns anywhere is defined, and a read that may see nil (`if jit then`) is
-- never a finding: no false positives.
local tidepool = require("tidepool")

local DIR = "spec/fixtures/precheck"
local HINT_NAME = "Nothing ran: the script was checked before running. Fix the name: Lua has "
  .. "only its standard library (string, table, math, utf8, coroutine, os.time/clock/date) "
  .. "and tidepool's json, tools and parallel."
local HINT_WAY = "Nothing ran: the script was checked before running. Lua's standard "
  .. "library is small: write it the Lua way the message shows."
local HINT_LATER = "Nothing ran: the script was checked before running. A local is visible "
  .. "only below the line that declares it: define functions before the code that calls them."
local HINT_UNKNOWN = "Check the tool's name with tools.list() or tools.search(\"words\")."
local HINT_INPUT = "Fix the arguments: the message gives the JSON path of the wrong value and "
  .. "what was expected; tools.describe(name) shows the schema."

local function run(src)
  return tidepool.run(src, { tools = { DIR } })
end

-- The error of src, checked to come from the pre-run check with no call made.
local function finding(src)
  local env = run(src)
  assert(not env.ok, "the script was expected to fail")
  assert.is_true(env.error.precheck, env.error.message)
  assert.are.same({}, env.calls)
  local e = env.error
  return { e.code, e.message, e.hint, e.line }
end

local function ok(src)
  local env = run(src)
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message))
  return env.result, env
end

describe("the pre-run check", function()
  it("stops a script before its first call when a later line would fail", function()
    assert.same({ "runtime", "`strng` is not defined (the sandbox has no global `strng` and "
      .. "the script never assigns one), so indexing it fails; did you mean `string`?",
      HINT_NAME, 2 }, finding([[
local r = tools.gh.create_issue{title = "made before the typo"}
return strng.format("%d", r.number)]]))
    assert.same({ n = 0 }, ok("return tools.gh.calls{}"))  -- the issue was never created
  end)

  it("names the nearest real global", function()
    assert.same({ "runtime", "`tols` is not defined (the sandbox has no global `tols` and the "
      .. "script never assigns one), so indexing it fails; did you mean `tools`?", HINT_NAME, 1 },
      finding("local r = tols.gh.search{q = 'x'}"))
    assert.same({ "runtime", "`prnt` is not defined (the sandbox has no global `prnt` and the "
      .. "script never assigns one), so calling it fails; did you mean `print`?", HINT_NAME, 2 },
      finding("local x = 1\nprnt(x)"))
  end)

  it("names a function Lua never had, and the Lua way", function()
    local cases = {
      { "local p = string.split('a,b', ',')", "string.split does not exist in Lua: split with "
        .. "gmatch: for part in s:gmatch(\"[^,]+\") do ... end" },
      { "local s = table.join({'a'}, ',')", "table.join does not exist in Lua: join with "
        .. "table.concat(list, sep)" },
      { "local t = table.map({1}, tostring)", "table.map does not exist in Lua: write a loop: "
        .. "local out = {} for i, v in ipairs(t) do out[i] = f(v) end" },
      { "table.push({}, 1)", "table.push does not exist in Lua: append with table.insert(t, v) "
        .. "or t[#t + 1] = v" },
      { "return string.trim(' a ')", "string.trim does not exist in Lua: trim with "
        .. "s:match(\"^%s*(.-)%s*$\")" },
    }
    for _, c in ipairs(cases) do
      assert.same({ "runtime", c[2], HINT_WAY, 1 }, finding(c[1]))
    end
    assert.same({ "runtime", "string.fromat does not exist in Lua; did you mean string.format?",
      HINT_NAME, 1 }, finding("return string.fromat('%d', 1)"))
  end)

  it("names what the sandbox leaves out, with the allowlist's reason", function()
    assert.same({ "runtime", "`io` is not available in the sandbox (host files and processes)",
      "Nothing ran: the script was checked before running. The sandbox has no files, modules "
      .. "or host access: do it with a tool (tools.list(), tools.search).", 1 },
      finding("local f = io.open('x')"))
    assert.same("os.getenv does not exist in Lua: the sandbox has no environment: pass values "
      .. "in the script", finding("return os.getenv('HOME')")[2])
  end)

  it("says a local function is called before the line that declares it", function()
    assert.same({ "runtime", "`helper` is called on line 1 before its `local` on line 2 is "
      .. "declared, so it is a global here, and nil: move the local (function) helper above "
      .. "line 1, or declare `local helper` first and assign it later", HINT_LATER, 1 },
      finding("local function main() return helper() end\nlocal function helper() return 1 end\n"
        .. "return main()"))
  end)

  it("reports a tool path that names no tool as tool.unknown, with did you mean", function()
    assert.same({ "tool.unknown", "there is no tool tools.gh.craete_issue; did you mean "
      .. "tools.gh.create_issue? (tools.list() lists them all)", HINT_UNKNOWN, 2 },
      finding("tools.gh.search{q = 'a'}\nlocal r = tools.gh.craete_issue{title = 'x'}"))
  end)

  it("reports literal arguments the schema refuses, with the JSON path", function()
    assert.same({ "tool.invalid_input", "tools.gh.create_issue: invalid arguments: $.titel: "
      .. "unexpected property \"titel\" (allowed: \"body\", \"labels\", \"title\") "
      .. "(tools.describe(\"gh.create_issue\") shows what it takes)", HINT_INPUT, 1 },
      finding("tools.gh.create_issue{title = 'a', titel = 'b'}"))
    assert.same({ "tool.invalid_input", "tools.gh.create_issue: invalid arguments: $: missing "
      .. "required property \"title\" (tools.describe(\"gh.create_issue\") shows what it takes)",
      HINT_INPUT, 1 }, finding("tools.gh.create_issue{body = 'no title'}"))
  end)

  it("reads a plain schema's fields the same way, with or without a finding", function()
    assert.same({ "tool.invalid_input", "tools.gh.lock: invalid arguments: $.resaon: "
      .. "unexpected property \"resaon\" (allowed: \"number\", \"reason\") "
      .. "(tools.describe(\"gh.lock\") shows what it takes)", HINT_INPUT, 2 },
      finding("local n = 1\ntools.gh.lock{number = n, resaon = 'dup'}"))
    assert.same({ "tool.invalid_input", "tools.gh.lock: invalid arguments: $: missing "
      .. "required property \"number\"; $.why: unexpected property \"why\" (allowed: "
      .. "\"number\", \"reason\") (tools.describe(\"gh.lock\") shows what it takes)",
      HINT_INPUT, 1 }, finding("tools.gh.lock{reason = 'dup', why = 1}"))
    -- clean calls run; a field that may be nil is not surely sent, and a table that is not
    -- a literal may hold anything: neither is a finding
    local env = run([[
local maybe = tools.gh.calls{}.nothing
local a = tools.gh.lock{number = 2, reason = "done"}
local b = tools.gh.lock{number = 3, extra = maybe}
local args = {number = 4}
local c = tools.gh.lock(args)
return {a.locked, b.locked, c.locked}]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ 2, 3, 4 }, env.result)
  end)

  it("lists every finding, in line order, the first as the error", function()
    local env = run([[
local x = strng.upper("a")
tools.gh.craete_issue{title = "x"}
local p = string.split("a", ",")
return prnt(x)]])
    assert.is_false(env.ok)
    local got = {}
    for _, f in ipairs(env.error.findings) do got[#got + 1] = { f.line, f.code } end
    assert.same({ { 1, "runtime" }, { 2, "tool.unknown" }, { 3, "runtime" }, { 4, "runtime" } },
      got)
    assert.are.equal(env.error.message, env.error.findings[1].message)
  end)

  it("tidepool check prints every finding", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("local x = strng.upper('a')\ntools.gh.craete_issue{title = 'x'}\nreturn prnt(x)\n")
    f:close()
    local p = io.popen("build/tidepool check --tools " .. DIR .. " " .. path .. " 2>&1; echo rc=$?")
    local out = p:read("a")
    p:close()
    os.remove(path)
    assert.matches("error %[runtime%] at line 1: `strng` is not defined", out)
    assert.matches("error %[tool.unknown%] at line 2: there is no tool tools.gh.craete_issue", out)
    assert.matches("error %[runtime%] at line 3: `prnt` is not defined", out)
    assert.matches("rc=1\n$", out)
  end)
end)

describe("the pre-run check makes no false positives", function()
  local clean = {
    -- reads that may see nil without failing
    "if jit then return jit.version end return 1",
    "local x = undefined_name return x == nil",
    "assert(not T or T.gcage({}) == 'old') return 1",
    "if T == nil then return 1 end return T.x()",
    -- a global assigned anywhere counts as defined, before or after the use
    "local function a() return helper() end function helper() return 2 end return a()",
    "_G.helper = function() return 3 end return helper()",
    -- dynamic access is not checked
    "_G['hel' .. 'per'] = function() return 4 end return helper()",
    "load('function g() return 5 end')() return g()",
    "setmetatable(_G, {__index = function(_, k) return function() return k end end}) "
      .. "return whatever()",
    "local function f() local _ENV = {x = {y = 6}} return x.y end return f()",
    "local e = _ENV e.z = function() return 7 end return z()",
    -- tools written dynamically, or through discovery
    "local name = 'create_issue' return tools.gh[name]{title = 't'}.title",
    "return #tools.list() > 0 and tools.describe('gh.search') ~= nil",
    "return #tools.search('issue') >= 0",
    -- literal arguments that would pass: a maybe-nil field, a dynamic key, a table built first
    "local x return tools.gh.create_issue{title = 't', titel = x}.title",
    "local k = 'title' return tools.gh.create_issue{[k] = 't'}.title",
    "local a = {} a.title = 't' return tools.gh.create_issue(a).title",
    "return tools.gh.create_issue{title = 't', titel = nil}.title",
    "return tools.gh.search{anything = 1, q = 'x'}.items ~= nil",
    -- a local that shadows a library, a library field that exists
    "local string = {split = function() return 8 end} return string.split()",
    "return string.format('%d', 9)",
  }
  for _, src in ipairs(clean) do
    it(src, function()
      local env = run(src)
      assert.is_nil(env.error and env.error.precheck, env.error and env.error.message)
    end)
  end

  -- Every script of the repository's examples, and Lua 5.4.7's own test files when they
  -- are at build/lua-testes/testes (make lua-testes): a finding is only ever a name the
  -- sandbox does not have, used where it would fail.
  local function check_file(path)
    local p = io.popen("build/tidepool check " .. path .. " 2>&1")
    local out = p:read("a")
    p:close()
    local found = {}
    for code, msg in out:gmatch("error %[([%w._]+)%] at line %d+: ([^\n]*)") do
      found[#found + 1] = code .. ": " .. msg
    end
    return found
  end

  it("on the examples", function()
    assert.same({}, check_file("examples/report.lua"))
  end)

  local testes = "build/lua-testes/testes"
  local probe = io.open(testes .. "/all.lua")
  if probe then probe:close() end
  local expected = {  -- each fails at that line in the sandbox
    ["code.lua"] = "f",        -- f() in functions only compiled for their opcodes (testC)
    ["cstack.lua"] = "require", ["gengc.lua"] = "require",
    ["verybig.lua"] = "io",
  }
  local names = { "api", "attrib", "big", "bitwise", "bwcoercion", "calls", "closure", "code",
    "constructs", "coroutine", "cstack", "db", "errors", "events", "files", "gc", "gengc",
    "goto", "heavy", "literals", "locals", "math", "nextvar", "pm", "sort", "strings",
    "tpack", "tracegc", "utf8", "vararg", "verybig" }
  for _, n in ipairs(names) do
    local test = probe and it or pending
    test("on Lua 5.4.7's testes/" .. n .. ".lua", function()
      local found = check_file(testes .. "/" .. n .. ".lua")
      local allowed = expected[n .. ".lua"]
      for _, f in ipairs(found) do
        local ok_name = f:find("not available in the sandbox", 1, true)
          or f:find("does not exist in Lua", 1, true)
          or (allowed and f:find("`" .. allowed .. "`", 1, true))
        assert(ok_name, n .. ".lua: " .. f)
      end
      if not allowed then assert.same({}, found) end
    end)
  end
end)
