-- Plugin tools: Lua files in tool directories, run in the engine's host state as
-- coroutines on the engine's libuv loop (engine/host/host.c, lua/host.lua, tools/).
local tidepool = require("tidepool")

local GOOD = "spec/fixtures/plugins/good"
local BROKEN = "spec/fixtures/plugins/broken"

local function run(src, opts)
  opts = opts or {}
  if opts.tools == nil then opts.tools = { GOOD } end
  return tidepool.run(src, opts)
end

describe("a plugin tool", function()
  it("is called from a script and returns its result", function()
    local env = run([[return tools.test.echo{a = 1, b = {"x", "y"}, c = {}}]])
    assert.is_true(env.ok)
    assert.same(1, env.result.a)
    assert.same({ "x", "y" }, env.result.b)
    assert.equal("test.echo", env.calls[1].tool)
    assert.is_true(env.calls[1].ok)
  end)

  it("counts bytes_in and bytes_out as the length of the JSON text, though none is made",
    function()
      local env = run([[return tools.test.echo{a = 1, b = {"x", "y"}, s = "q\"\n"}]])
      assert.is_true(env.ok, env.error and env.error.message)
      local text = '{"a":1,"b":["x","y"],"s":"q\\"\\n"}'
      assert.equal(33, #text)
      assert.equal(#text, env.calls[1].bytes_in)
      assert.equal(#text, env.calls[1].bytes_out)
    end)

  it("waits with ctx.sleep without blocking the calls around it (parallel 10 x 50 ms)", function()
    local env = run([[
      local fs = {}
      for i = 1, 10 do fs[i] = function() return tools.test.nap{ms = 50}.ms end end
      return {parallel(table.unpack(fs))}
    ]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ 50, 50, 50, 50, 50, 50, 50, 50, 50, 50 }, env.result)
    -- ten sleeps of 50 ms one after the other would take 500 ms
    assert.is_true(env.stats.wall_ms >= 45, "wall " .. env.stats.wall_ms)
    assert.is_true(env.stats.wall_ms < 400, "wall " .. env.stats.wall_ms)
  end)

  it("fails with tool.failed and the handler's message, file and line", function()
    local env = run([[
      local ok, err = pcall(tools.test.fail, {})
      return {ok = ok, code = err.code, message = err.message}
    ]])
    assert.is_true(env.ok)
    assert.is_false(env.result.ok)
    assert.equal("tool.failed", env.result.code)
    -- the plugin file and line, without the host's folders
    assert.equal("tools.test.fail failed: test.lua:25: the fixture failed on purpose",
                 env.result.message)
  end)

  it("can fail with its own tool.* code by raising {code=, message=}", function()
    local env = run([[
      local ok, err = pcall(tools.test.deny, {})
      return {code = err.code, message = err.message}
    ]])
    assert.equal("tool.denied", env.result.code)
    assert.matches("not for you", env.result.message, 1, true)
  end)

  it("times out with tool.timeout, the run goes on, and the handler never resumes", function()
    local env = run([[
      local ok, err = pcall(tools.test.hang, {})
      tools.test.nap{ms = 400}   -- past the moment the hung handler would have woken
      return {ok = ok, code = err.code}
    ]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.is_false(env.result.ok)
    assert.equal("tool.timeout", env.result.code)
    assert.equal("tool.timeout", env.calls[1].error)
    assert.is_true(env.calls[1].ms < 300, "timed out after " .. env.calls[1].ms .. " ms")
    for _, line in ipairs(env.logs) do assert.not_matches("late", line) end
  end)

  it("that waits on a callback that never comes times out", function()
    local env = run([[
      local ok, err = pcall(tools.test.never, {})
      return err.code
    ]])
    assert.equal("tool.timeout", env.result)
  end)

  it("uncaught, a tool error ends the run with its code and the script's line", function()
    local env = run("local x = 1\nreturn tools.test.fail{}")
    assert.is_false(env.ok)
    assert.equal("tool.failed", env.error.code)
    assert.equal(2, env.error.line)
  end)

  it("a plugin's warn() goes to the engine's log, not to stderr as Lua's", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("return tools.w.say{}\n")
    f:close()
    local p = io.popen("build/tidepool run --tools spec/fixtures/warn " .. path
      .. " 2>&1 >/dev/null; echo rc=$?")
    local out = p:read("a")
    p:close()
    os.remove(path)
    assert.equal("low disk\nstill logged\n", out:gsub("%-%- [^\n]*\n", ""):gsub("rc=0\n$", ""))
    assert.matches("rc=0\n$", out)
  end)

  it("logs into the run's logs with ctx.log", function()
    local env = run([[print("before"); tools.test.log{n = 7}; print("after")]])
    assert.is_true(env.ok)
    assert.same({ "before", "[test.log] hello\t7", "after" }, env.logs)
  end)

  it("sees the call in ctx: run_id, call_id, tool, deadline_ms", function()
    local env = run([[tools.test.echo{}; return tools.test.ctx{}]])
    assert.is_true(env.ok)
    assert.equal(2, env.result.call_id)
    assert.equal("test.ctx", env.result.tool)
    assert.is_true(math.type(env.result.run_id) == "integer" and env.result.run_id > 0)
    assert.is_true(env.result.deadline_ms > 0 and env.result.deadline_ms <= 30000)
    assert.equal(tidepool.null, env.result.workspace)
    local again = run([[return tools.test.ctx{}]])
    assert.is_true(again.result.run_id > env.result.run_id)
  end)

  it("waits on any luv callback with ctx.await and gets its arguments", function()
    local env = run([[return tools.test.await{}]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ a = "fired", b = 42 }, env.result)
  end)

  it("routes an error raised in its luv callback to its call", function()
    local env = run([[local ok, err = pcall(tools.test.cb_error, {}) return err]])
    assert.equal("tool.failed", env.result.code)
    assert.matches("boom in a callback", env.result.message, 1, true)
  end)

  it("returning a value JSON cannot hold fails with tool.invalid_output", function()
    local env = run([[local ok, err = pcall(tools.test.bad_result, {}) return err.code]])
    assert.equal("tool.invalid_output", env.result)
  end)

  it("gets [] for an empty table where its output schema asks for an array", function()
    local env = run([[
      local r = tools.test.empty{}
      return {items = json.encode(r.items), meta = json.encode(r.meta)}
    ]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ items = "[]", meta = "{}" }, env.result)
  end)
end)

describe("plugin loading", function()
  local env = run([[return tools.list()]], { tools = { BROKEN }, builtin_tools = false })
  local warnings = env.warnings or {}

  local function warning(pattern)
    for _, w in ipairs(warnings) do
      if w:match(pattern) then return w end
    end
  end

  it("loads the good plugins, before and after the broken ones", function()
    assert.is_true(env.ok)
    assert.same({ "ok.in_list", "ok.one", "ok.two" }, env.result)
  end)

  it("reports a syntax error with its file and line", function()
    assert.truthy(warning("broken/b_syntax%.lua:3: .*expected"))
  end)

  it("reports an error raised while loading, with its line", function()
    assert.truthy(warning("broken/c_runtime%.lua:2: attempt to index a nil value"))
    assert.truthy(warning("broken/j_errorobj%.lua:2: %(error object is a table value%)"))
  end)

  it("reports a schema that does not compile", function()
    assert.truthy(warning("broken/d_schema%.lua:2: tool bad%.schema: bad input schema: .*pattern"))
  end)

  it("reports a missing handler at the tool's line, and keeps the list's good tool", function()
    assert.truthy(warning("broken/e_nohandler%.lua:4: tool bad%.nohandler: no handler"))
  end)

  it("reports a duplicate name with where the first one is", function()
    assert.truthy(warning("broken/f_duplicate%.lua:3: tool ok%.one is defined already "
      .. "%(at spec/fixtures/plugins/broken/a_good%.lua:2%)"))
  end)

  it("reports a bad name, an unknown field, and a file that returns no tool", function()
    assert.truthy(warning("broken/g_badname%.lua:2: .*bad name"))
    assert.truthy(warning("broken/h_unknown_field%.lua:2: .*unknown field 'inputs'"))
    assert.truthy(warning("broken/i_nothing%.lua:1: the file returned nil"))
  end)

  it("gives one line per problem and ignores files that are not *.lua", function()
    assert.equal(9, #warnings)
    for _, w in ipairs(warnings) do assert.not_matches("readme", w) end
  end)

  it("reports a directory that cannot be read", function()
    local e = run([[return 1]], { tools = { "spec/fixtures/plugins/no-such-dir" } })
    assert.is_true(e.ok)
    assert.matches("cannot read the tools directory", e.warnings[1], 1, true)
  end)

  it("keeps each plugin's globals to itself", function()
    local e = run([[return tools.list()]], { tools = { "spec/fixtures/plugins/envs" } })
    assert.is_nil(e.warnings)
    local r = run([[return {tools.env.a{}, tools.env.b{}}]],
      { tools = { "spec/fixtures/plugins/envs" } })
    assert.same({ { mine = "a" }, { mine = "b" } }, r.result)
  end)
end)

describe("built-in tools", function()
  local opts = { builtin_tools = true, tools = {} }

  it("load by default, as tidepool run loads them; builtin_tools = false leaves them out",
     function()
    local names = { "kv.delete", "kv.get", "kv.list", "kv.set", "time.now", "time.sleep" }
    assert.same(names, tidepool.run("return tools.list()").result)
    assert.same(names, tidepool.run("return tools.list()", { memory = "8M" }).result)
    local env = tidepool.run('tools.kv.set{key = "builtin.default", value = 7} '
      .. 'return tools.kv.get{key = "builtin.default"}.value')
    assert.equal(7, env.result)
    assert.same({}, tidepool.run("return tools.list()", { builtin_tools = false }).result)
    local off = tidepool.run("return tools.kv.get{key = 'x'}", { builtin_tools = false })
    assert.equal("tool.unknown", off.error.code)
    local both = tidepool.run("return tools.list()", { tools = { BROKEN } }).result
    assert.same({ "kv.delete", "kv.get", "kv.list", "kv.set", "ok.in_list", "ok.one",
                  "ok.two", "time.now", "time.sleep" }, both)
  end)

  it("time.now gives unix_ms and an ISO 8601 UTC string", function()
    local env = run([[return tools.time.now{}]], opts)
    assert.is_true(env.ok, env.error and env.error.message)
    assert.equal("integer", math.type(env.result.unix_ms))
    assert.is_true(math.abs(env.result.unix_ms - os.time() * 1000) < 5000)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", env.result.iso)
  end)

  it("time.sleep waits and says how long; refuses more than 60000 ms", function()
    local env = run([[return tools.time.sleep{ms = 30}]], opts)
    assert.is_true(env.ok, env.error and env.error.message)
    assert.is_true(env.result.slept_ms >= 29, "slept " .. env.result.slept_ms)
    local bad = run([[local ok, err = pcall(tools.time.sleep, {ms = 60001}) return err.code]], opts)
    assert.equal("tool.invalid_input", bad.result)
  end)

  it("kv keeps values across runs of one engine", function()
    local a = run([[
      tools.kv.set{key = "spec.n", value = {n = 1, list = {1, 2}, none = json.null}}
      return tools.kv.set{key = "spec.s", value = "text"}
    ]], opts)
    assert.is_true(a.ok, a.error and a.error.message)
    local b = run([[
      return {get = tools.kv.get{key = "spec.n"}, list = tools.kv.list{prefix = "spec."},
              missing = tools.kv.get{key = "nope"}, del = tools.kv.delete{key = "spec.s"},
              del2 = tools.kv.delete{key = "spec.s"}, empty = tools.kv.list{prefix = "zz"}}
    ]], opts)
    assert.is_true(b.ok, b.error and b.error.message)
    assert.is_true(b.result.get.found)
    assert.same({ n = 1, list = { 1, 2 }, none = tidepool.null }, b.result.get.value)
    assert.same({ "spec.n", "spec.s" }, b.result.list.keys)
    assert.is_false(b.result.missing.found)
    assert.equal(tidepool.null, b.result.missing.value)
    assert.is_true(b.result.del.deleted)
    assert.is_false(b.result.del2.deleted)
    assert.same({}, b.result.empty.keys)
  end)

  it("kv refuses to grow past its byte cap, with a clear error", function()
    local env = run([[
      local chunk = string.rep("x", 1000 * 1000)   -- 1 MB per value, under its 1 MiB cap
      local stored = 0
      for i = 1, 20 do
        local ok, err = pcall(tools.kv.set, {key = "big" .. i, value = chunk})
        if not ok then return {stored = stored, code = err.code, message = err.message} end
        stored = stored + 1
      end
      return {stored = stored}
    ]], opts)
    assert.is_true(env.ok, env.error and env.error.message)
    assert.equal(16, env.result.stored)  -- 16 x 1000007 bytes fit in 16 MiB, 17 do not
    assert.equal("tool.failed", env.result.code)
    assert.matches("kv store is full", env.result.message, 1, true)
    local clean = run([[
      for i = 1, 16 do tools.kv.delete{key = "big" .. i} end
      return tools.kv.set{key = "after", value = string.rep("y", 1000 * 1000)}
    ]], opts)
    assert.is_true(clean.ok, clean.error and clean.error.message)
  end)

  it("kv refuses a value over 1 MiB as JSON, and says to write a file instead", function()
    local env = run([[
      local ok, err = pcall(tools.kv.set, {key = "huge", value = string.rep("x", 1024 * 1024)})
      return {ok = ok, code = err.code, message = err.message,
              found = tools.kv.get{key = "huge"}.found}
    ]], opts)
    assert.is_true(env.ok, env.error and env.error.message)
    assert.is_false(env.result.ok)
    assert.equal("tool.failed", env.result.code)
    assert.equal('tools.kv.set failed: the value under "huge" is 1048578 bytes as JSON, over '
      .. "the 1048576-byte (1 MiB) limit of one kv value; write it to a file with fs.write "
      .. "and store its path instead", env.result.message)
    assert.is_false(env.result.found)
  end)
end)

describe("a blocking handler (one that sleeps in C or loops instead of waiting)", function()
  local BLOCKING = "spec/fixtures/plugins/blocking"

  it("that sleeps in C past its timeout_ms is tool.timeout, with a hint about blocking", function()
    local env = run([[
      local ok, err = pcall(tools.block.sleep, { s = 1 })
      return { ok = ok, code = err.code, message = err.message }]], { tools = { BLOCKING } })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.is_false(env.result.ok)
    assert.equal("tool.timeout", env.result.code)
    assert.matches("^tools.block.sleep timed out: its handler held the engine for %d+ ms, past "
      .. "the call's time limit, without waiting %(it blocks in C or loops in Lua instead of "
      .. "waiting with ctx.sleep, ctx.await or luv%)$", env.result.message)
    assert.equal("tool.timeout", env.calls[1].error)
    assert.is_true(env.calls[1].ms >= 900, "held " .. env.calls[1].ms .. " ms")
  end)

  it("that loops in Lua is stopped at its deadline, even through its own pcall", function()
    local env = run([[
      local ok, err = pcall(tools.block.spin, {})
      return { ok = ok, code = err.code }]], { tools = { BLOCKING }, timeout = 20 })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ ok = false, code = "tool.timeout" }, env.result)
    assert.is_true(env.calls[1].ms >= 450, "stopped after " .. env.calls[1].ms .. " ms")
    assert.is_true(env.calls[1].ms < 5000, "stopped after " .. env.calls[1].ms .. " ms")
  end)

  it("that loops in Lua is stopped at its own deadline after calls with later ones", function()
    -- the host's watch is kept between resumes, set to wake at the first call's deadline
    -- (20 s out); the spin's 500 ms deadline must bring it forward
    local env = run([[
      local quick = tools.block.quick{}.quick and tools.block.quick{}.quick
      local ok, err = pcall(tools.block.spin, {})
      return { quick = quick, ok = ok, code = err.code }]], { tools = { BLOCKING }, timeout = 30 })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ quick = true, ok = false, code = "tool.timeout" }, env.result)
    assert.is_true(env.calls[3].ms >= 450, "stopped after " .. env.calls[3].ms .. " ms")
    assert.is_true(env.calls[3].ms < 5000, "stopped after " .. env.calls[3].ms .. " ms")
  end)

  it("that blocks, then waits, is closed: it never resumes and its <close> runs", function()
    local env = run([[
      local ok, err = pcall(tools.block.sleep_then_wait, {})
      return { code = err.code, closed = tools.block.closed{}.closed }]],
      { tools = { BLOCKING } })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.equal("tool.timeout", env.result.code)
    assert.equal(1, env.result.closed)
  end)

  it("that takes the run past its time limit gives the run a blocking hint, not a loop hint",
    function()
      local env = run("return tools.block.sleep_long_timeout{ s = 1.5 }",
        { tools = { BLOCKING }, timeout = 0.5 })
      assert.is_false(env.ok)
      assert.equal("limit.time", env.error.code)
      assert.matches("^tools.block.sleep_long_timeout held the engine for 1%.%d s without "
        .. "waiting: its plugin handler blocks", env.error.hint)
      assert.not_matches("loop that never ends", env.error.hint, 1, true)
    end)

  it("that raises has its <close> variables closed", function()
    local env = run([[
      local before = tools.block.closed{}.closed
      local ok, err = pcall(tools.block.fail_with_close, {})
      return { err.code, tools.block.closed{}.closed - before }]], { tools = { BLOCKING } })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ "tool.failed", 1 }, env.result)
  end)

  it("a run that loops on its own keeps the loop hint", function()
    local env = run("tools.block.closed{} while true do end",
      { tools = { BLOCKING }, timeout = 0.5 })
    assert.equal("limit.time", env.error.code)
    assert.matches("loop that never ends", env.error.hint, 1, true)
  end)
end)

describe("a reused handler record (coroutine and ctx of a call that returned)", function()
  local REUSE = "spec/fixtures/plugins/reuse"
  local function rrun(src, opts)
    opts = opts or {}
    opts.tools = { REUSE }
    return run(src, opts)
  end

  it("is reused for the next call, with that call's run_id, call_id and tool", function()
    local env = rrun([[return { tools.reuse.probe{}, tools.reuse.probe{} }]])
    assert.is_true(env.ok, env.error and env.error.message)
    local a, b = env.result[1], env.result[2]
    assert.equal(a.co, b.co)  -- the pool works: the other tests of reuse are not vacuous
    assert.same({ 1, 2 }, { a.call_id, b.call_id })
    assert.equal(a.run_id, b.run_id)
    assert.equal("reuse.probe", b.tool)
    assert.is_true(b.deadline_ok)
  end)

  it("does not carry what a handler wrote into ctx (fields, rawset, functions) to the next call",
    function()
      local env = rrun([[return { tools.reuse.probe{dirty = true}, tools.reuse.probe{} }]])
      assert.is_true(env.ok, env.error and env.error.message)
      local a, b = env.result[1], env.result[2]
      assert.equal(a.co, b.co)
      assert.is_nil(b.mine)
      assert.equal(2, b.call_id)
      assert.equal("reuse.probe", b.tool)
      assert.is_true(b.log_is_function)
      assert.is_true(b.sleep_is_function)
    end)

  it("does not carry a metatable a handler took off its ctx to the next call", function()
    local env = rrun([[return { tools.reuse.probe{strip = true}, tools.reuse.probe{} }]])
    assert.is_true(env.ok, env.error and env.error.message)
    local b = env.result[2]
    assert.equal(env.result[1].co, b.co)
    assert.same({ 2, "reuse.probe", true, true }, { b.call_id, b.tool, b.log_is_function,
      b.deadline_ok })
  end)

  it("is not reused when its handler left a debug hook on its coroutine", function()
    local env = rrun([[tools.reuse.hook{}
      return { probe = tools.reuse.probe{}, seen = tools.reuse.seen{} }]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.not_equal(env.result.seen.hook, env.result.probe.co)
    assert.is_false(env.result.probe.hook)
  end)

  it("is not reused when its handler raised", function()
    local env = rrun([[local ok, err = pcall(tools.reuse.fail, {})
      return { code = err.code, probe = tools.reuse.probe{}, seen = tools.reuse.seen{} }]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.equal("tool.failed", env.result.code)
    assert.not_equal(env.result.seen.fail, env.result.probe.co)
  end)

  it("is not reused when its handler yielded on its own", function()
    local env = rrun([[local ok, err = pcall(tools.reuse.yield, {})
      return { code = err.code, probe = tools.reuse.probe{}, seen = tools.reuse.seen{} }]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.equal("tool.failed", env.result.code)
    assert.not_equal(env.result.seen.yield, env.result.probe.co)
  end)

  it("is not reused when its handler ran past its deadline (tool.timeout)", function()
    local env = rrun([[local ok, err = pcall(tools.reuse.spin, {})
      return { code = err.code, probe = tools.reuse.probe{}, seen = tools.reuse.seen{} }]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.equal("tool.timeout", env.result.code)
    assert.not_equal(env.result.seen.spin, env.result.probe.co)
  end)

  it("is not reused when its handler left a luv timer pending: the timer's error cannot "
    .. "fail a later call", function()
    local env = rrun([[tools.reuse.leave_timer{ms = 20}
      local nap = tools.reuse.nap{ms = 300}
      return { nap = nap, seen = tools.reuse.seen{} }]])
    assert.is_true(env.ok, env.error and env.error.message)
    assert.not_equal(env.result.seen.leave_timer, env.result.nap.co)
    assert.equal(2, env.result.nap.after.call_id)
  end)

  it("hands each call a table of its own: the tables a handler keeps stay as they came",
    function()
      -- 300 calls with arguments of many shapes and sizes (nested tables, lists, reals,
      -- escapes, keys the fast path declines): the host state frees and reuses blocks all
      -- along, and none of a kept table may change
      local env = rrun([[
        local sent = {}
        tools.reuse.kept{}  -- what earlier runs of this engine left
        for i = 1, 300 do
          local a = { i = i, s = ("x"):rep(i % 40) .. "\n\"", flag = i % 2 == 0,
                      list = { i, i + 0.5, "\u{e9}", { i } }, nested = { deep = { k = i } } }
          if i % 3 == 0 then a["odd\tkey"] = i end
          if i % 5 == 0 then a.big = { ("y"):rep(300), ("z"):rep(i) } end
          sent[i] = a
          if tools.reuse.keep(a).n ~= i then error("call " .. i .. " kept a wrong count") end
        end
        return { sent = sent, kept = tools.reuse.kept{} }]])
      assert.is_true(env.ok, env.error and env.error.message)
      assert.equal(300, #env.result.kept)
      assert.same(env.result.sent, env.result.kept)
    end)

  it("after a handler raised, the next calls run whole, with the exact message each time",
    function()
      local env = rrun([[
        local out = {}
        tools.reuse.kept{}
        for i = 1, 40 do
          local ok, err = pcall(tools.reuse.fail, {})
          out[#out + 1] = tostring(ok) .. " " .. err.code .. " " .. err.message
          out[#out + 1] = tools.reuse.keep{ i = i }.n
        end
        return out]])
      assert.is_true(env.ok, env.error and env.error.message)
      for i = 1, 40 do
        assert.equal("false tool.failed tools.reuse.fail failed: reuse.lua:60: failing on purpose",
          env.result[2 * i - 1])
        assert.equal(i, env.result[2 * i])
      end
    end)

  it("gives each of many parallel calls its own run_id, call_id, tool and deadline", function()
    local env = rrun([[
      local fs = {}
      for i = 1, 20 do
        if i % 2 == 0 then fs[i] = function() return tools.reuse.nap{ms = 20} end
        else fs[i] = function() return tools.reuse.probe{} end end
      end
      return { parallel(table.unpack(fs)) }]])
    assert.is_true(env.ok, env.error and env.error.message)
    local ids = {}
    for i, r in ipairs(env.result) do
      local v = r.before or r
      if r.after then assert.same(r.before, r.after) end
      assert.equal(i % 2 == 0 and "reuse.nap" or "reuse.probe", v.tool)
      assert.is_true(v.deadline_ok)
      assert.equal(env.result[1].run_id, v.run_id)
      ids[#ids + 1] = v.call_id
    end
    table.sort(ids)
    for i = 1, 20 do assert.equal(i, ids[i]) end
    assert.equal(20, #env.result)
  end)
end)
