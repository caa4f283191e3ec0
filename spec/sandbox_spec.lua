-- The threat model of DESIGN.md section 5, one test per attack, with exact outcomes.
local tidepool = require "tidepool"

local function run(src, opts)
  return tidepool.run(src, opts)
end

-- Runs src and returns its result, failing the test when the run failed.
local function result(src, opts)
  local env = run(src, opts)
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message))
  return env.result
end

local function fails(src, code, opts)
  local env = run(src, opts)
  assert.is_false(env.ok)
  assert.are.equal(code, env.error.code)
  return env.error
end

describe("loading code", function()
  it("string.dump is absent, so no bytecode can be made", function()
    assert.is_true(result("return string.dump == nil"))
  end)

  it("load refuses a hand-made binary chunk", function()
    assert.are.same({ true, "attempt to load a binary chunk (mode is 't')" },
      result([[local f, err = load("\27Lua\x54\0garbage") return { f == nil, err }]]))
  end)

  it("load refuses a binary chunk handed over by a reader function", function()
    assert.are.same({ true, "attempt to load a binary chunk (mode is 't')" }, result([[
      local n = 0
      local f, err = load(function() n = n + 1 if n == 1 then return "\27Lua" end end)
      return { f == nil, err }]]))
  end)

  it("load refuses mode 'b' and 'bt'", function()
    assert.are.same({ true, "attempt to load a binary chunk (the sandbox loads text only)",
                      true }, result([[
      local f, err = load("return 1", "x", "b")
      local g = load("return 1", "x", "bt")
      return { f == nil, err, g == nil }]]))
  end)

  it("load compiles text in the sandbox's environment", function()
    assert.are.same({ true, true, true, 5 }, result([[
      local f = load("x = 5 return io, os.getenv, require")
      local io_, getenv, req = f()
      return { io_ == nil, getenv == nil, req == nil, x }]]))
  end)

  it("load with an explicit env sees only that env", function()
    assert.are.same({ true, 7, true }, result([[
      local f = load("return print, x, string", "c", "t", { x = 7 })
      local p, x, s = f()
      return { p == nil, x, s == nil }]]))
  end)
end)

describe("reaching the host", function()
  it("io, os.execute, os.getenv, package, require, debug, dofile, loadfile are absent",
    function()
    assert.are.same({ true, true, true, true, true, true, true, true, true, true, true }, result([[
      return { io == nil, os.execute == nil, os.getenv == nil, os.exit == nil,
               os.remove == nil, package == nil, require == nil, debug == nil,
               dofile == nil, loadfile == nil, rawget(_G, "module") == nil }]]))
  end)

  it("calling require is an error before anything runs, with the allowlist's reason", function()
    local err = fails('require("os")', "runtime")
    assert.are.equal("`require` is not available in the sandbox (loads modules and C "
      .. "libraries from the host)", err.message)
    assert.are.equal(1, err.line)
    assert.is_true(err.precheck)
    assert.is_string(err.hint)
  end)

  it("calling require where the check cannot see it is Lua's runtime error with a hint", function()
    local err = fails('local r = _G["req" .. "uire"]\nr("os")', "runtime")
    assert.are.equal("attempt to call a nil value (local 'r')", err.message)
    assert.are.equal(2, err.line)
    assert.is_string(err.hint)
  end)

  it("assigning to a library table fails with a clear error and changes nothing", function()
    local err = fails("string.upper = function() return 'pwned' end", "runtime")
    assert.are.equal("library tables are read-only in the sandbox "
      .. "(copy what you need into a local table)", err.message)
    assert.are.same({ false, "ABC" }, result([[
      local ok = pcall(function() string.upper = nil end)
      return { ok, ("abc"):upper() }]]))
  end)

  it("adding a new key to math, table, os, coroutine, utf8 or json fails", function()
    assert.are.same({ false, false, false, false, false, false }, result([[
      local r = {}
      for _, lib in ipairs{ math, table, os, coroutine, utf8, json } do
        r[#r + 1] = pcall(function() lib.evil = 1 end)
      end
      return r]]))
  end)

  it("rawset on a library table fails and the change is not visible", function()
    assert.are.same({ false, "library tables are read-only in the sandbox", true }, result([[
      local ok, err = pcall(rawset, string, "upper", print)
      return { ok, err, string.upper ~= print }]]))
  end)

  it("setmetatable on a library table fails", function()
    assert.are.same({ false, "cannot change a protected metatable" }, result([[
      return { pcall(setmetatable, string, {}) }]]))
  end)

  it("table.insert into a library table fails", function()
    assert.are.same({ false, "library tables are read-only in the sandbox "
      .. "(copy what you need into a local table)", true }, result([[
      local ok, err = pcall(table.insert, table, "x")
      return { ok, err, rawlen(table) == 0 and table[1] == nil }]]))
  end)

  it("getmetatable('') answers a read-only view whose __index is the string table", function()
    assert.are.same({ "table", true, false, false, false, false, "ABC", 11 }, result([[
      local mt = getmetatable("")
      return { type(mt), rawequal(mt.__index, string), getmetatable(string),
               pcall(function() mt.__index = { upper = function() return "x" end } end),
               pcall(function() mt.__add = nil end),
               pcall(rawset, mt, "__index", {}),
               ("abc"):upper(), "10" + 1 }]]))
  end)

  it("the string metatable cannot be replaced or changed", function()
    assert.are.same({ false, "ABC" }, result([[
      local ok = pcall(setmetatable, "", { __index = { upper = function() return "x" end } })
      return { ok, ("abc"):upper() }]]))
  end)

  it("a change a script makes is not seen by the next script", function()
    result("local t = {} _G.leak = 1 pcall(function() string.upper = nil end) return 1")
    assert.are.same({ true, "ABC" }, result("return { leak == nil, ('abc'):upper() }"))
  end)
end)

describe("escaping the limits", function()
  it("setmetatable refuses __gc", function()
    assert.are.same({ false, "__gc metamethods are not allowed in the sandbox (finalizers "
      .. "would run outside the limits); use a to-be-closed variable (local x <close>) to "
      .. "clean up" }, result("return { pcall(setmetatable, {}, { __gc = function() end }) }"))
  end)

  it("__gc added to a metatable after setmetatable never runs", function()
    assert.are.same({ 0 }, result([[
      local runs = 0
      local mt = {}
      setmetatable({}, mt)
      mt.__gc = function() runs = runs + 1 end
      local junk = {}
      for i = 1, 1e4 do junk[i % 100] = {} end
      return { runs }]]))
  end)

  it("collectgarbage answers Lua 5.4's options as Lua does; tuning changes nothing", function()
    assert.are.same({ true, 0, 0, false, 0, true, "incremental", "generational", 200, 100,
                      true, 0, true }, result([[
      local n = collectgarbage("count")
      local out = { math.type(n) == "float" and n > 0 }
      out[#out + 1] = collectgarbage("collect")
      out[#out + 1] = collectgarbage("stop")
      out[#out + 1] = collectgarbage("isrunning")
      out[#out + 1] = collectgarbage("restart")
      out[#out + 1] = collectgarbage("isrunning")
      out[#out + 1] = collectgarbage("generational")
      out[#out + 1] = collectgarbage("incremental")
      out[#out + 1] = collectgarbage("setpause", 150)
      out[#out + 1] = collectgarbage("setstepmul", 300)
      out[#out + 1] = type(collectgarbage("step")) == "boolean"
      out[#out + 1] = collectgarbage()
      local _, msg = pcall(collectgarbage, "bogus")
      out[#out + 1] = msg:find("invalid option 'bogus'", 1, true) ~= nil
      return out]]))
  end)

  it("collectgarbage('stop') cannot get past the memory limit: the cap still holds", function()
    fails([[collectgarbage("stop") local t = {} for i = 1, 1e8 do t[i] = {} end]],
      "limit.memory", { memory = 4 * 1024 * 1024 })
  end)

  it("collectgarbage('stop') does not stop the collector: garbage is still reclaimed", function()
    assert.are.equal(1000, result([[
      collectgarbage("stop")
      local n = 0
      for i = 1, 1000 do local s = ("x"):rep(64 * 1024) .. i n = n + 1 end
      return n]], { memory = 4 * 1024 * 1024 }))
  end)
end)

describe("leaks", function()
  it("tostring shows a per-run number instead of an address", function()
    assert.are.same({ "table: #1", "table: #2", "table: #1", "function: #3", "thread: #4" },
      result([[
      local a, b = {}, {}
      return { tostring(a), tostring(b), tostring(a), tostring(print),
               tostring(coroutine.create(print)) }]]))
  end)

  it("print shows no address", function()
    local env = run("print({}, print, 1, nil, true) return 1")
    assert.are.same({ "table: #1\tfunction: #2\t1\tnil\ttrue" }, env.logs)
  end)

  it("string.format('%s') of a table or function shows no address", function()
    assert.are.equal("table: #1|function: #2|x",
      result([[return string.format("%s|%s|%s", {}, print, "x")]]))
  end)

  it("no output of tostring, print or format contains 0x", function()
    local env = run([[
      local t = setmetatable({}, { __name = "My" })
      print(t, {}, coroutine.create(print), string.format("%s %s", {}, t))
      return tostring(t) .. tostring(function() end)]])
    assert.is_true(env.ok)
    assert.is_nil(env.logs[1]:find("0x", 1, true))
    assert.is_nil(env.result:find("0x", 1, true))
    assert.are.equal("My: #2function: #5", env.result)
  end)

  it("string.format('%p') is refused", function()
    assert.are.same({ false, "bad argument #2 to 'format' ('%p' shows memory addresses, "
      .. "which the sandbox hides)" }, result([[return { pcall(string.format, "%p", {}) }]]))
    assert.are.same({ false, "bad argument #3 to 'format' ('%p' shows memory addresses, "
      .. "which the sandbox hides)" }, result([[
      return { pcall(string.format, "%d %-10p", 1, print) }]]))
  end)

  it("warn produces nothing, even after '@on'", function()
    local env = run([[warn("@on") warn("secret", "message") return 1]])
    assert.is_true(env.ok)
    assert.are.same({}, env.logs)
  end)
end)

describe("yields", function()
  it("coroutine.yield at top level is a runtime error, not a host request", function()
    local err = fails("coroutine.yield({ tool = 'x' })", "runtime")
    assert.are.equal("attempt to yield from outside a coroutine", err.message)
    assert.are.equal(1, err.line)
    assert.are.same({ false, "attempt to yield from outside a coroutine" },
      result("return { pcall(coroutine.yield, 1) }"))
  end)

  it("a script's coroutines resume, yield, report status and finish as in Lua", function()
    assert.are.same({ { true, 2 }, "suspended", { true, 20 }, "dead",
                      { false, "cannot resume dead coroutine" } }, result([[
      local co = coroutine.create(function(a) local b = coroutine.yield(a + 1) return b * 2 end)
      local r = {}
      r[1] = { coroutine.resume(co, 1) }
      r[2] = coroutine.status(co)
      r[3] = { coroutine.resume(co, 10) }
      r[4] = coroutine.status(co)
      r[5] = { coroutine.resume(co) }
      return r]]))
  end)

  it("coroutine.wrap generators work and a dead wrap raises", function()
    assert.are.same({ 1, 2, 3, false, "cannot resume dead coroutine" }, result([[
      local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end)
      local a, b, c = gen(), gen(), gen()
      gen()
      local ok, err = pcall(gen)
      return { a, b, c, ok, err }]]))
  end)

  it("an error inside wrap propagates with its position", function()
    assert.are.same({ false, "script:1: boom" },
      result([[return { pcall(coroutine.wrap(function() error("boom") end)) }]]))
  end)

  it("running, isyieldable and status inside and outside a coroutine", function()
    assert.are.same({ false, true, { true, false, true, "running", "normal" } }, result([[
      local main, ismain = coroutine.running()
      local co
      co = coroutine.create(function()
        local c, m = coroutine.running()
        return { c == co, m, coroutine.isyieldable(), coroutine.status(co),
                 coroutine.status(main) }
      end)
      local _, r = coroutine.resume(co)
      return { coroutine.isyieldable(), ismain, r }]]))
  end)

  it("coroutine.close runs pending __close handlers and reports errors", function()
    assert.are.same({ true, "dead", "closed", false, "script:8: boom" }, result([[
      local log = {}
      local co = coroutine.create(function()
        local x <close> = setmetatable({}, { __close = function() log[1] = "closed" end })
        coroutine.yield()
      end)
      coroutine.resume(co)
      local ok = coroutine.close(co)
      local bad = coroutine.create(function() error("boom") end)
      coroutine.resume(bad)
      local ok2, err = coroutine.close(bad)
      return { ok, coroutine.status(co), log[1], ok2, err }]]))
  end)

  it("closing the running coroutine fails", function()
    assert.are.same({ false, "cannot close a running coroutine" },
      result("return { pcall(coroutine.close, coroutine.running()) }"))
  end)

  it("nested coroutines resume each other", function()
    assert.are.same({ "out", "indone" }, result([[
      local outer = coroutine.create(function()
        local inner = coroutine.create(function() coroutine.yield("in") return "done" end)
        local _, a = coroutine.resume(inner)
        coroutine.yield("out")
        local _, b = coroutine.resume(inner)
        return a .. b
      end)
      local _, r1 = coroutine.resume(outer)
      local _, r2 = coroutine.resume(outer)
      return { r1, r2 }]]))
  end)
end)

describe("the host reading script values", function()
  it("an error object's __tostring and __index are not run by the host", function()
    local t0 = os.clock()
    local err = fails([[
      error(setmetatable({}, { __tostring = function() while true do end end,
                               __index = function() while true do end end }))]],
      "runtime", { timeout = 2 })
    assert.are.equal("(error object is a table value without a string 'message' field)",
      err.message)
    assert.is_true(os.clock() - t0 < 1)
  end)

  it("an error object's raw message field is used, not its __index", function()
    local err = fails([[error(setmetatable({ message = "real" },
      { __index = function() return "fake" end, __tostring = function() return "fake" end }))]],
      "runtime")
    assert.are.equal("real", err.message)
  end)

  it("a returned table's __index, __pairs and __len are not run", function()
    local env = run([[
      return setmetatable({ 1, 2 }, { __index = function() while true do end end,
        __pairs = function() while true do end end, __len = function() return 10 end })]],
      { timeout = 2 })
    assert.is_true(env.ok)
    assert.are.same({ 1, 2 }, env.result)
    assert.are.same({ a = 1 }, result([[
      return setmetatable({ a = 1 }, { __pairs = function(t) return next, {}, nil end })]]))
  end)

  it("a cycle in the result is a clear error with its path", function()
    local err = fails("local t = { a = {} } t.a.b = t return t", "runtime")
    assert.truthy(err.message:find("cycle at $.a.b", 1, true))
  end)

  it("nesting deeper than 128 levels is a clear error", function()
    local err = fails("local t = {} for _ = 1, 1000 do t = { t } end return t", "runtime")
    assert.truthy(err.message:find("nesting deeper than 128 levels at $[0][0]", 1, true))
  end)

  it("a function in the result is a clear error with its path", function()
    local err = fails("return { f = print }", "runtime")
    assert.truthy(err.message:find("cannot convert a function at $.f to JSON", 1, true))
  end)

  it("NaN and infinities are clear errors with their path", function()
    assert.truthy(fails("return 0/0", "runtime").message
      :find("NaN cannot be represented in JSON (at $)", 1, true))
    assert.truthy(fails("return { x = 1/0 }", "runtime").message
      :find("inf cannot be represented in JSON (at $.x)", 1, true))
    assert.truthy(fails("return { -1/0 }", "runtime").message
      :find("-inf cannot be represented in JSON (at $[0])", 1, true))
  end)

  it("invalid UTF-8 in a string or key is a clear error with its path", function()
    assert.truthy(fails([[return { s = "ok\xff" }]], "runtime").message
      :find("invalid UTF-8 in the string at $.s", 1, true))
    assert.truthy(fails([[return { ["\xff"] = 1 }]], "runtime").message
      :find("invalid UTF-8 in the object key", 1, true))
  end)

  it("NUL bytes in strings survive as valid JSON", function()
    assert.are.equal("a\0b", result([[return "a\0b"]]))
  end)

  it("a yield of a value that looks like a tool request is still a plain yield", function()
    assert.are.same({ true, "tool" }, result([[
      local co = coroutine.create(function() coroutine.yield("tool", { name = "x" }) end)
      local ok, a = coroutine.resume(co)
      return { ok, a }]]))
  end)
end)
