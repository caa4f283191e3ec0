-- Tool calls, their records, logs and messages under attack (issue 7): every call
-- attempt counts against tool_calls, the envelope's calls list is bounded with an exact
-- summary, the host copies bounded names and messages, and every log entry costs at least
-- a minimum against the output limit. Fixture tools: spec/fixtures/calls_limits (cl.*)
-- and spec/fixtures/tools_calls (fx.*).
local tidepool = require("tidepool")

local DIRS = { "spec/fixtures/calls_limits", "spec/fixtures/tools_calls" }

local function run(src, opts)
  opts = opts or {}
  opts.tools = DIRS
  return tidepool.run(src, opts)
end

local function fails(src, code, opts)
  local env = run(src, opts)
  assert.is_false(env.ok, "the run should have failed with " .. code)
  assert.equal(code, env.error.code, env.error.message)
  return env
end

-- "tool=true" or "tool=code" for each call record of an envelope.
local function outcomes(env)
  local seen = {}
  for i, c in ipairs(env.calls) do
    seen[i] = c.summary and "summary" or c.tool .. "=" .. tostring(c.error or c.ok)
  end
  return seen
end

-- n copies of s, then the rest of the values given.
local function rep(s, n, ...)
  local t = {}
  for i = 1, n do t[i] = s end
  for _, v in ipairs({ ... }) do t[#t + 1] = v end
  return t
end

local LIMIT_20 = "the script made more than its limit of 20 tool calls"

describe("every call attempt counts against tool_calls", function()
  it("an unknown-tool loop in pcall ends with limit.tool_calls at the limit", function()
    local env = fails([[
      local n = 0
      for _ = 1, 1e6 do pcall(tools.nope.x) n = n + 1 end
      return n
    ]], "limit.tool_calls", { tool_calls = 20 })
    assert.equal(LIMIT_20 .. "; the last 20 calls were all tools.nope.x with the same "
      .. "arguments: the loop does not advance (pass on the next page's cursor, or stop when "
      .. "an answer repeats)", env.error.message)
    assert.same(rep("nope.x=tool.unknown", 20, "nope.x=limit.tool_calls"), outcomes(env))
  end)

  it("calls refused where Lua cannot wait, in a pcall loop, count", function()
    local env = fails([[
      for _ = 1, 1e6 do
        pcall(string.gsub, "a", "a", function() return tools.fx.echo{} end)
      end
    ]], "limit.tool_calls", { tool_calls = 20 })
    assert.equal(LIMIT_20, env.error.message)
    assert.same(rep("fx.echo=runtime", 20, "fx.echo=limit.tool_calls"), outcomes(env))
  end)

  it("calls with arguments that are not a table, in a pcall loop, count", function()
    local env = fails("for _ = 1, 1e6 do pcall(tools.fx.echo, 'text') end",
      "limit.tool_calls", { tool_calls = 20 })
    assert.same(rep("fx.echo=tool.invalid_input", 20, "fx.echo=limit.tool_calls"),
      outcomes(env))
  end)

  it("calls with unsendable arguments (a function, a cycle), in a pcall loop, count", function()
    local env = fails([[
      local cyc = {} cyc.self = cyc
      for i = 1, 1e6 do pcall(tools.fx.echo, i % 2 == 0 and { c = cyc } or { f = print }) end
    ]], "limit.tool_calls", { tool_calls = 20 })
    assert.same(rep("fx.echo=tool.invalid_input", 20, "fx.echo=limit.tool_calls"),
      outcomes(env))
  end)

  it("calls made with ':' instead of '.', in a pcall loop, count", function()
    local env = fails("for _ = 1, 1e6 do pcall(function() return tools.fx:echo{} end) end",
      "limit.tool_calls", { tool_calls = 20 })
    assert.same(rep("fx.echo=runtime", 20, "fx.echo=limit.tool_calls"), outcomes(env))
  end)

  it("the limit is checked before the arguments are converted", function()
    -- each call's arguments are 1 MB: past the limit, none of them is copied out
    local env = fails([[
      local big = { s = string.rep("x", 2^20) }
      for _ = 1, 1e6 do pcall(tools.nope.x, big) end
    ]], "limit.tool_calls", { tool_calls = 20 })
    assert.equal(21, #env.calls)
    assert.equal(0, env.calls[21].bytes_in)
  end)

  it("a parallel fan-out of unknown tools ends with limit.tool_calls", function()
    local env = fails([[
      local fs = {}
      local x = "x"  -- built at run time: written out, the pre-run check refuses it first
      for i = 1, 1000 do fs[i] = function() return tools.nope[x]{} end end
      return parallel(table.unpack(fs))
    ]], "limit.tool_calls", { tool_calls = 20 })
    assert.equal(LIMIT_20 .. "; the last 20 calls were all tools.nope.x with the same "
      .. "arguments: the loop does not advance (pass on the next page's cursor, or stop when "
      .. "an answer repeats)", env.error.message)
    assert.same(rep("nope.x=tool.unknown", 20, "nope.x=limit.tool_calls"), outcomes(env))
  end)

  it("parallels of unknown tools in a pcall loop end with limit.tool_calls", function()
    local env = fails([[
      local x, y = "x", "y"  -- built at run time, as above
      for _ = 1, 1e6 do
        pcall(parallel, function() return tools.nope[x]{} end, function() return tools[y]{} end)
      end
    ]], "limit.tool_calls", { tool_calls = 20 })
    local want = {}
    for i = 1, 10 do want[2 * i - 1] = "nope.x=tool.unknown" want[2 * i] = "y=tool.unknown" end
    want[21] = "nope.x=limit.tool_calls"
    assert.same(want, outcomes(env))
  end)
end)

describe("the envelope's calls list is bounded", function()
  it("5000 calls with no call limit: 100 records, then an exact summary", function()
    local env = run([[
      for _ = 1, 5000 do tools.cl.echo{} end
      return "done"
    ]], { tool_calls = 0 })
    assert.is_true(env.ok)
    assert.equal(101, #env.calls)
    assert.same(rep("cl.echo=true", 100, "summary"), outcomes(env))
    assert.same({ summary = true, calls = 4900, failed = 0, by_tool = { ["cl.echo"] = 4900 } },
      env.calls[101])
  end)

  it("300 refused calls of each kind: 100 records, then the summary of the rest", function()
    local env = run([[
      local cyc = {} cyc.self = cyc
      local out = {}
      for i = 1, 300 do
        local _, e = pcall(tools.fx.echo, { c = cyc })
        local _, e2 = pcall(tools.fx.echo, "text")
        local _, e3 = pcall(function() return tools.fx:echo{} end)
        if i == 300 then out = { e.tool, e.code, e2.tool, e2.code, e3 } end
      end
      return out
    ]], { tool_calls = 0 })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ "fx.echo", "tool.invalid_input", "fx.echo", "tool.invalid_input",
      "tools.fx.echo: called with ':' — call it with a dot: tools.fx.echo{...}" }, env.result)
    assert.equal(101, #env.calls)
    assert.same({ summary = true, calls = 800, failed = 800, by_tool = { ["fx.echo"] = 800 } },
      env.calls[101])
  end)

  it("the summary counts failures, at most 20 tool names, then 'other'", function()
    local env = run([[
      for i = 1, 100 do tools.cl.echo{} end
      for i = 1, 5000 do
        if i % 2 == 0 then tools.cl.echo{} else pcall(tools["u" .. (i % 50)]) end
      end
      return "done"
    ]], { tool_calls = 10000 })
    assert.is_true(env.ok)
    assert.equal(101, #env.calls)
    local s = env.calls[101]
    assert.same({ true, 5000, 2500 }, { s.summary, s.calls, s.failed })
    -- names in the order first seen: u1, cl.echo, u3 ... u37, then the other unknown
    -- names (u39 ... u49) count as "other"
    local want = { ["cl.echo"] = 2500 }
    for k = 1, 37, 2 do want["u" .. k] = 100 end
    want.other = 2500 - 19 * 100
    assert.same(want, s.by_tool)
  end)

  it("the call past tool_calls = 10000 is in the summary, as a failure", function()
    local env = fails("for _ = 1, 20000 do tools.cl.echo{} end", "limit.tool_calls",
      { tool_calls = 10000 })
    assert.same({ summary = true, calls = 9901, failed = 1, by_tool = { ["cl.echo"] = 9901 } },
      env.calls[101])
  end)

  it("a run of many calls keeps the host's memory flat (peak RSS from /proc)", function()
    if os.getenv("SANITIZE") then  -- ASan keeps freed memory in quarantine
      pending("peak RSS is not the host's own under the sanitizers")
      return
    end
    -- this build's interpreter, next to the module (build/lua/lua)
    local lua = assert(package.searchpath("tidepool", package.cpath)):gsub("tidepool%.so$", "lua")
    -- a separate process per run, so each peak is its own
    local function peak_kb(n)
      local script = ([[
        local tidepool = require "tidepool"
        local env = tidepool.run("for _ = 1, %d do pcall(tools.nope.x) end return 1",
          { tool_calls = 0, memory = "8M" })
        assert(env.ok and env.calls[101].calls == %d - 100)
        local f = assert(io.open("/proc/self/status"))
        print(f:read("a"):match("VmHWM:%%s*(%%d+)"))
        f:close()
      ]]):format(n, n)
      local p = assert(io.popen(lua .. " -e '" .. script .. "'"))
      local out = p:read("a")
      assert(p:close(), "the child run failed")
      return assert(tonumber(out), out)
    end
    local small, large = peak_kb(10000), peak_kb(200000)
    -- 190000 more records kept would take about 70 MB
    assert.is_true(large - small < 2048, ("%d KB, then %d KB"):format(small, large))
  end)
end)

describe("tool names the host copies are bounded", function()
  it("a 1 MB tool name is cut to 256 bytes and is tool.unknown", function()
    local env = run([[
      local ok, e = pcall(function() return tools[("a"):rep(2^20)]{} end)
      return {ok, e.code, e.tool, e.message}
    ]])
    assert.is_true(env.ok, env.error and env.error.message)
    local r = env.result
    local cut = ("a"):rep(256)
    assert.same({ false, "tool.unknown", cut, "there is no tool tools." .. cut .. "...: that "
      .. "name is 1048576 bytes long, and tool names are at most 128 bytes (tools.list() lists "
      .. "the tools there are)" }, r)
    assert.same({ cut .. "=tool.unknown" }, outcomes(env))
  end)

  it("a loop of calls with 1 MB names ends with limit.tool_calls", function()
    local env = fails([[
      local big = ("b"):rep(2^20)
      for _ = 1, 1e6 do pcall(tools[big]) end
    ]], "limit.tool_calls", { tool_calls = 20 })
    assert.equal(21, #env.calls)
    assert.equal(("b"):rep(256), env.calls[21].tool)
  end)

  it("a name with a NUL byte does not reach the tool before the NUL", function()
    local r = run([[
      local ok, e = pcall(function() return tools["cl.echo\0x"]{} end)
      return {ok, e.code, e.message}
    ]]).result
    assert.same({ false, "tool.unknown", "there is no tool tools.cl.echo?x: a tool name has "
      .. "no NUL bytes (tools.list() lists the tools there are)" }, r)
  end)
end)

describe("messages the host keeps are bounded", function()
  local CUT = "...[cut]"

  it("a handler's 1 MB failure message is cut to 2048 bytes, marked", function()
    local r = run([[
      local ok, e = pcall(tools.cl.fail, {n = 2^20})
      return {#e.message, e.message:sub(1, 22), e.message:sub(-12)}
    ]]).result
    assert.same({ 2048 + #CUT, "tools.cl.fail failed: ", "xxxx" .. CUT }, r)
  end)

  it("uncaught, the envelope's error message is cut the same way", function()
    local env = fails("tools.cl.fail{n = 2^20}", "tool.failed")
    assert.equal(2048 + #CUT, #env.error.message)
    assert.equal("xxxx" .. CUT, env.error.message:sub(-12))
  end)

  it("a script's own 1 MB error message is cut to 2048 bytes, marked", function()
    local env = fails("error(('y'):rep(2^20), 0)", "runtime")
    assert.equal(("y"):rep(2048) .. CUT, env.error.message)
  end)

  it("an error object with a 1 MB message is cut the same way", function()
    local env = fails("error({code = 'tool.denied', message = ('z'):rep(2^20)})", "tool.denied")
    assert.equal(("z"):rep(2048) .. CUT, env.error.message)
  end)
end)

describe("each log entry costs at least 16 bytes of the output limit", function()
  local NOTE = "...[output truncated: the 1600-byte output limit was reached]"

  it("a flood of print() ends with limit.output after 100 entries of a 1600-byte limit",
    function()
    local env = fails("for _ = 1, 1e7 do print() end", "limit.output", { max_output = 1600 })
    assert.same(rep("", 100, NOTE), env.logs)
  end)

  it("a flood of print('') ends the same way", function()
    local env = fails("while true do print('') end", "limit.output", { max_output = 1600 })
    assert.same(rep("", 100, NOTE), env.logs)
  end)

  it("short entries pay the minimum, longer ones their length", function()
    local env = fails("print('abc') print(('d'):rep(1580)) print('e')", "limit.output",
      { max_output = 1600 })
    -- 16 + 1580 = 1596: 4 bytes left, and 'e' costs 16
    assert.same({ "abc", ("d"):rep(1580), "e" .. NOTE }, env.logs)
  end)

  it("with no output limit, a print() flood ends with limit.memory at the host budget",
    function()
    -- each entry holds about 96 bytes of host memory, charged against the 1 MiB budget
    local env = fails("for _ = 1, 1e7 do print() end", "limit.memory",
      { max_output = 0, memory = "1M" })
    assert.is_true(#env.logs > 10000 and #env.logs <= 1048576 // 96, #env.logs)
  end)

  it("a handler's empty ctx.log lines pay the minimum, and past the limit are dropped",
    function()
    local env = run("return tools.cl.log{n = 1000}.logged", { max_output = 1600 })
    assert.is_true(env.ok)
    assert.equal(1000, env.result)
    assert.same(rep("[cl.log] ", 100, NOTE), env.logs)
  end)
end)
