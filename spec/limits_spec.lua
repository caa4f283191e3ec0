-- Each limit's exact error code, at its boundary, and that no script outlives it.
local tidepool = require "tidepool"

local function fails(src, code, opts)
  local env = tidepool.run(src, opts)
  assert.is_false(env.ok, "the run should have failed with " .. code)
  assert.are.equal(code, env.error.code, env.error.message)
  return env
end

-- Runs a script that must be stopped by its time limit (seconds), with the given code,
-- and checks that it ended no later than its limit plus a second (generous: a loaded
-- machine under the sanitizers and an always-running collector stretches wall time,
-- while a script the limit missed runs for minutes).
local function stopped_in_time(src, code, opts)
  local limit = opts.timeout or opts.cpu
  local spent = opts.timeout and "wall_ms" or "cpu_ms"  -- a loaded machine stretches wall time
  local env = fails(src, code, opts)
  assert.is_true(env.stats[spent] < limit * 1000 + 1000,
    ("%s %.1f for a %.0f ms limit"):format(spent, env.stats[spent], limit * 1000))
  return env
end

describe("limit.memory", function()
  it("stops a table that grows past the cap", function()
    local env = fails("local t = {} for i = 1, 1e7 do t[i] = i end", "limit.memory",
      { memory = "1M" })
    assert.are.equal("the script used more than its memory limit of 1 MiB", env.error.message)
    assert.are.equal(1, env.error.line)
  end)

  it("pcall cannot swallow a memory kill", function()
    fails([[
      local ok = pcall(function() local t = {} for i = 1, 1e7 do t[i] = i end end)
      return ok]], "limit.memory", { memory = "1M" })
  end)

  it("an allocation at the cap inside pcall in a loop ends the run", function()
    fails("for _ = 1, 1000 do pcall(string.rep, 'x', 2^20) end return 1", "limit.memory",
      { memory = "1M" })
  end)

  it("a caught allocation failure is still fatal", function()
    fails("local ok, e = pcall(string.rep, 'x', 2^21) return { ok, e }", "limit.memory",
      { memory = "1M" })
  end)

  it("string.rep past the cap is limit.memory, not a runtime error", function()
    fails("local s = string.rep('x', 2^30) return #s", "limit.memory")
  end)

  it("xpcall's handler cannot swallow a memory kill", function()
    fails([[
      local t = {}
      xpcall(function() for i = 1, 1e7 do t[i] = i end end,
             function() t = nil return "handled" end)
      return "survived"]], "limit.memory", { memory = "1M" })
  end)

  it("garbage that the collector can free does not count", function()
    local env = tidepool.run([[
      local n = 0
      for i = 1, 2000 do local s = ("y"):rep(100) .. i n = n + #s end
      return n]], { memory = "64K" })
    assert.is_true(env.ok)
    assert.are.equal(2000 * 100 + 9 + 90 * 2 + 900 * 3 + 1001 * 4, env.result)
  end)
end)

describe("out-of-memory stepping", function()
  local script = [[
    local t = {}
    for i = 1, 200 do
      t[i] = { id = i, name = string.format("item-%03d", i), tags = { "a", "b" } }
    end
    local function counter() local n = 0 return function() n = n + 1 return n end end
    local c = counter()
    for _ = 1, 10 do c() end
    local co = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i * 10) end end)
    local s = 0
    for _ = 1, 3 do s = s + co() end
    local parts = {}
    for i = 1, 50 do parts[#parts + 1] = t[i].name end
    local text = json.encode({ first = t[1], count = #t })
    local back = json.decode(text)
    return { joined = #table.concat(parts, ","), sum = s, calls = c(), name = back.first.name,
             text = #text }
  ]]
  local expected = { joined = 50 * 8 + 49, sum = 60, calls = 11, name = "item-001" }

  it("every failure under rising caps is a clean limit.memory, then the script succeeds",
    function()
    local cap, seen, last = 16 * 1024, 0, nil
    while cap < 4 * 1024 * 1024 do
      local ok, env = pcall(tidepool.run, script, { memory = cap })
      assert.is_true(ok, "the engine failed at cap " .. cap .. ": " .. tostring(env))
      if env.ok then last = env break end
      assert.are.equal("limit.memory", env.error.code,
        "cap " .. cap .. ": " .. tostring(env.error.message))
      seen = seen + 1
      cap = cap + 1024
    end
    assert.is_truthy(last, "never succeeded")
    assert.is_true(seen > 10)
    local r = last.result
    r.text = nil
    assert.are.same(expected, r)
  end)
end)

describe("limit.instructions", function()
  local src = "local s = 0 for i = 1, 100 do s = s + i end return s"

  it("a script passes at its exact instruction count and fails one below", function()
    local n = tidepool.run(src, { instructions = 1000000000 }).stats.instructions
    assert.is_true(n > 200 and n < 220, "count " .. n)  -- 2 per iteration, a few more
    local ok_env = tidepool.run(src, { instructions = n })
    assert.is_true(ok_env.ok)
    assert.are.equal(5050, ok_env.result)
    assert.are.equal(n, ok_env.stats.instructions)
    local env = fails(src, "limit.instructions", { instructions = n - 1 })
    assert.are.equal(("the script ran more than its limit of %d instructions"):format(n - 1),
      env.error.message)
    assert.are.equal(n, env.stats.instructions)
  end)

  it("instructions are counted exactly over many hook periods", function()
    local env = tidepool.run("local n = 0 for i = 1, 200000 do n = n + 1 end return n",
      { instructions = 1000000000 })
    assert.are.equal(400006, env.stats.instructions)
  end)

  it("a loop of short coroutines cannot escape the instruction limit", function()
    fails([[
      local n = 0
      for _ = 1, 100 do
        coroutine.wrap(function() for _ = 1, 20000 do n = n + 1 end end)()
      end
      return n]], "limit.instructions", { instructions = 1000000 })
  end)

  it("stops an endless loop", function()
    local env = fails("while true do end", "limit.instructions", { instructions = 1000 })
    assert.are.equal(1001, env.stats.instructions)
  end)

  it("pcall cannot swallow an instruction kill", function()
    fails([[
      for _ = 1, 10 do pcall(function() while true do end end) end
      return "survived"]], "limit.instructions", { instructions = 10000 })
  end)

  it("a backtracking pattern is charged as instructions", function()
    fails("return ('a'):rep(3e4):find('.-.-.-.-.-b')", "limit.instructions",
      { instructions = 1000000 })
  end)
end)

describe("limit.cpu", function()
  it("stops an endless loop", function()
    local env = stopped_in_time("while true do end", "limit.cpu", { cpu = 0.5 })
    assert.are.equal("the script used more than its CPU time limit of 500 ms",
      env.error.message)
  end)
end)

describe("limit.time", function()
  local function loops(name, src)
    it(name, function()
      stopped_in_time(src, "limit.time", { timeout = 0.5 })
    end)
  end

  it("stops an endless loop with the exact message", function()
    local env = stopped_in_time("while true do end", "limit.time", { timeout = 0.5 })
    assert.are.equal("the script ran longer than its time limit of 500 ms", env.error.message)
    assert.are.equal(1, env.error.line)
    assert.are.equal("while true do end", env.error.source)
  end)

  loops("pcall cannot swallow a time kill",
    "while true do pcall(function() while true do end end) end")
  loops("xpcall with a looping handler cannot outlive the limit",
    "xpcall(function() while true do end end, function() while true do end end) return 1")
  loops("error objects cannot stop the kill: a loop that rethrows",
    "while true do pcall(error, setmetatable({}, { __index = function() end })) end")
  loops("a loop inside a coroutine is stopped",
    "coroutine.wrap(function() while true do end end)()")
  loops("a coroutine that catches the kill and resumes another is stopped", [[
    while true do
      local co = coroutine.create(function() while true do end end)
      coroutine.resume(co)
    end]])
  loops("a __close handler that loops is stopped", [[
    do local x <close> = setmetatable({}, { __close = function() while true do end end }) end
    return 1]])
  loops("a __close handler run by an error cannot outlive the limit", [[
    pcall(function()
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      while true do end
    end)
    return 1]])
  loops("a __close handler run by coroutine.close is stopped", [[
    local co = coroutine.create(function()
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      coroutine.yield()
    end)
    coroutine.resume(co)
    coroutine.close(co)
    return 1]])
  loops("a __close handler that loops after the kill inside a coroutine is stopped", [[
    coroutine.wrap(function()
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      while true do end
    end)()]])
end)

describe("long C calls are stopped within the time limit", function()
  local function stops(name, src, opts)
    it(name, function()
      -- 0.5 s, stopped within a second past it: far above a loaded machine's jitter, far
      -- below what each script runs for when nothing stops it
      stopped_in_time(src, "limit.time", opts or { timeout = 0.5 })
    end)
  end

  stops("find with a backtracking pattern", "return ('a'):rep(3e4):find('.-.-.-.-.-b')")
  stops("gmatch with a backtracking pattern",
    "for _ in ('a'):rep(3e4):gmatch('.-.-.-.-b') do end")
  stops("gsub with a backtracking pattern", "return (('a'):rep(3e4):gsub('.-.-.-.-b', ''))")
  stops("match with a backtracking pattern in a loop",
    "while true do local _ = ('a'):rep(5e4):match('^(a-)-b') end")
  stops("table.concat over a huge range with a C __index",
    "return table.concat(setmetatable({}, { __index = rawlen }), '', 1, 2^40)")
  stops("table.concat over a huge range with a Lua __index",
    "return table.concat(setmetatable({}, { __index = function() return '' end }), '', 1, 2^40)")
  stops("table.move over a huge range", "table.move({}, 1, 2^40, 2)")
  stops("table.sort of a million numbers", [[
    local t = {}
    for i = 1, 1e6 do t[i] = (i * 7919) % 1000003 end
    table.sort(t)
    return t[1] ]])
  stops("comparing huge strings in a loop", [[
    local a, b = ("x"):rep(1e7) .. "a", ("x"):rep(1e7) .. "b"
    local n = 0
    while true do if a < b then n = n + 1 end end]])

  it("string.rep of an empty string a huge number of times returns at once", function()
    local env = tidepool.run("return #string.rep('', 1e15)", { timeout = 0.2 })
    assert.is_true(env.ok)
    assert.are.equal(0, env.result)
  end)

  it("string.rep with a count past Lua's own size limit raises Lua's error at once", function()
    local env = fails("return #string.rep('x', 1e15)", "runtime", { timeout = 0.2 })
    assert.are.equal("resulting string too large", env.error.message)
  end)

  it("string.rep past the size Lua can make is Lua's catchable error, before the memory "
    .. "limit is considered", function()
    local env = tidepool.run([[
      local ok, e = pcall(string.rep, 'x', 2^62)
      local ok2, e2 = pcall(string.rep, 'aa', 1 << 30)
      local ok3 = pcall(string.rep, 'ab', 2^40, ',')
      return { ok, e, ok2, e2, ok3 }]], { timeout = 0.5, memory = 1024 * 1024 })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ false, "resulting string too large", false, "resulting string too large",
      false }, env.result)
  end)

  it("string.rep under Lua's size limit and over the memory limit is limit.memory", function()
    local env = fails("local ok = pcall(string.rep, 'x', 2^30) return ok", "limit.memory",
      { timeout = 0.5 })
    assert.are.equal("the script used more than its memory limit of 64 MiB", env.error.message)
  end)

  it("string.rep of a result larger than the memory limit is limit.memory", function()
    fails("return #(('x'):rep(5 * 1024 * 1024))", "limit.memory", { memory = 4 * 1024 * 1024 })
    fails("return #string.rep('abc', 1e6, ('-'):rep(10))", "limit.memory",
      { memory = 4 * 1024 * 1024 })
  end)

  it("table.concat and .. past the memory limit are limit.memory", function()
    fails([[local t = {} for i = 1, 64 do t[i] = ("x"):rep(64 * 1024) end
            local s = table.concat(t) .. table.concat(t) return #s]], "limit.memory",
      { memory = 4 * 1024 * 1024 })
    fails([[local s = ("x"):rep(1024 * 1024) for i = 1, 10 do s = s .. s end return #s]],
      "limit.memory", { memory = 4 * 1024 * 1024 })
    fails([[return #string.format("%s%s%s%s%s", ("x"):rep(1e6), ("x"):rep(1e6), ("x"):rep(1e6),
            ("x"):rep(1e6), ("x"):rep(1e6))]], "limit.memory", { memory = 4 * 1024 * 1024 })
  end)

  it("patterns that finish give the same answers as Lua's own matcher", function()
    local cases = {
      { ("a"):rep(200) .. "b", ".-.-b" }, { ("ab"):rep(3), "(a-)b$" },
      { "key = value", "^(%w+)%s*=%s*(%w+)$" }, { "f(a(b)c)d", "%b()" },
      { "THE (quick) fox", "%f[%a]%a+" }, { "x.y.z", "." }, { "aaa", "a-a" },
    }
    for _, c in ipairs(cases) do
      local src = ("local s, p = %q, %q return { { s:find(p) }, { s:match(p) }, "
        .. "{ s:gsub(p, '<%%0>') } }"):format(c[1], c[2])
      local env = tidepool.run(src)
      local s, p = c[1], c[2]
      assert.are.same({ { s:find(p) }, { s:match(p) }, { s:gsub(p, "<%0>") } }, env.result,
        p)
    end
  end)
end)

describe("limit.output", function()
  it("a print flood is cut with the truncation marker", function()
    local env = fails("while true do print(('x'):rep(100)) end", "limit.output",
      { max_output = 1000 })
    assert.are.equal(11, #env.logs)
    assert.are.equal(("x"):rep(100), env.logs[10])
    assert.are.equal("...[output truncated: the 1000-byte output limit was reached]",
      env.logs[11])
    assert.are.equal("the script printed more than its output limit of 1000 bytes",
      env.error.message)
  end)

  it("pcall cannot swallow an output kill", function()
    fails("for _ = 1, 100 do pcall(print, ('x'):rep(100)) end return 1", "limit.output",
      { max_output = 1000 })
  end)

end)

describe("limit.result", function()
  it("a result too large is limit.result", function()
    local env = fails("return ('x'):rep(1000)", "limit.result", { max_result = 100 })
    assert.are.equal("the script's return value is larger than its result limit of 100 "
      .. "bytes of JSON (at $)", env.error.message)
  end)

  it("a result just under the cap passes", function()
    local env = tidepool.run("return ('x'):rep(98)", { max_result = 100 })
    assert.is_true(env.ok)
  end)

  it("the values of a multi-value return share one cap", function()
    local env = fails("local s = ('x'):rep(60) return s, s", "limit.result", { max_result = 100 })
    assert.are.equal("the script's return value is larger than its result limit of 100 "
      .. "bytes of JSON (at $)", env.error.message)
    assert.is_true(tidepool.run("local s = ('x'):rep(40) return s, s", { max_result = 100 }).ok)
  end)

  it("a result whose escapes make it longer than the cap is limit.result", function()
    local env = fails("return ('\\1'):rep(40)", "limit.result", { max_result = 100 })
    assert.are.equal("the script's result is 242 bytes of JSON, over its result limit of "
      .. "100 bytes", env.error.message)
  end)
end)

describe("host memory of the result", function()
  it("a table returned through many references is charged each time: limit.memory", function()
    local env = fails("local t = {} for _ = 1, 40 do t = { t, t } end return t",
      "limit.memory", { memory = "16M", max_result = 0 })
    assert.truthy(env.error.message:find("^the script's result as JSON needs more host "
      .. "memory than its memory limit of 16 MiB"))
  end)

  it("an envelope past the budget ends with limit.memory and keeps the logs", function()
    -- the result's text fits, but not together with the envelope that copies it
    local env = fails("print(('y'):rep(900000)) return ('x'):rep(7500000)", "limit.memory",
      { memory = "16M", max_result = 0 })
    assert.are.equal(900000, #env.logs[1])
    assert.is_nil(env.result)
  end)

  it("a result that fits the budget is returned whole", function()
    local env = tidepool.run("local t = {} for i = 1, 1000 do t[i] = { i, 'x' } end return t",
      { memory = "16M" })
    assert.is_true(env.ok)
    assert.are.equal(1000, #env.result)
  end)
end)

describe("limit.source", function()
  it("a script over the source limit is refused before it runs", function()
    local env = fails("print('ran') return 1", "limit.source", { max_source = 10 })
    assert.are.equal("the script is 21 bytes, over its source limit of 10 bytes",
      env.error.message)
    assert.are.same({}, env.logs)
  end)

  it("a script exactly at the source limit runs", function()
    local env = tidepool.run("return 1", { max_source = 8 })
    assert.is_true(env.ok)
  end)

  it("load of a chunk over the source limit fails", function()
    local env = tidepool.run("local f, e = load(('-'):rep(200)) return { f == nil, e }",
      { max_source = 100 })
    assert.are.same({ true, "chunk of 200 bytes is over the 100-byte source limit" },
      env.result)
  end)
end)

describe("json.decode's input cap", function()
  it("is 1/16 of the memory limit, so the host never holds many times the script's memory",
    function()
    local env = tidepool.run([[
      local s = "[" .. ("1,"):rep(300000) .. "1]"
      local ok, err = pcall(json.decode, s)
      return { ok, err }
    ]], { memory = "8M" })
    assert.is_true(env.ok)
    assert.is_false(env.result[1])
    assert.are.equal("json.decode: the text is 600003 bytes, over the 524288 bytes this "
      .. "sandbox decodes at once (1/16 of its memory limit); decode smaller pieces or raise "
      .. "the memory limit", env.result[2])
  end)

  it("decodes text under the cap", function()
    local env = tidepool.run('return #json.decode("[" .. ("1,"):rep(100000) .. "1]")',
      { memory = "8M" })
    assert.is_true(env.ok)
    assert.are.equal(100001, env.result)
  end)

  it("text under the cap whose tree needs more host memory than the limit is limit.memory",
    function()
    -- 200,001 integers are ~400 KB of text but ~10 MB of jansson nodes (48 bytes each)
    local env = fails('return #json.decode("[" .. ("1,"):rep(200000) .. "1]")',
      "limit.memory", { memory = "8M" })
    assert.are.equal("json.decode: decoding 400003 bytes of JSON text would take about "
      .. "9600192 bytes of host memory, more than the run's memory limit allows; decode "
      .. "smaller pieces", env.error.message)
  end)
end)
