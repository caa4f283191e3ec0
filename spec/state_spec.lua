-- --state DIR: kv keys (and rate buckets) in an SQLite database that outlives the
-- process. Driven as processes: tidepool run twice on one directory, tidepool mcp killed
-- with SIGKILL right after it acknowledged writes and started again.
local dkjson = require "dkjson"
local uv = require "luv"

local H = require("spec.helper")
local BIN, shell_quote, write_file, temp_dir = H.BIN, H.shell_quote, H.write, H.temp_dir

-- tidepool run --json ARGS on script; returns the envelope, the status and stderr.
local function run(script, args)
  local out, err, rc = H.run_script(script, "--json " .. args)
  return dkjson.decode(out), rc, err
end

describe("tidepool run --state DIR", function()
  it("keeps kv keys across processes, and their byte count with them", function()
    local dir = temp_dir() .. "/state"  -- made when missing
    local a, rc = run([[
      local r = tools.kv.set{key = "greeting", value = {text = "hello", n = 1}}
      tools.kv.set{key = "other", value = 7}
      return r]], "--state " .. shell_quote(dir))
    assert.are.equal(0, rc)
    assert.are.same({ bytes = 22, used = 30 }, a.result)
    local b, rc2 = run([[
      local g = tools.kv.get{key = "greeting"}
      local l = tools.kv.list{}
      local d = tools.kv.delete{key = "other"}
      local s = tools.kv.set{key = "x", value = true}
      return {g = g, keys = l.keys, deleted = d.deleted, used = s.used}]],
      "--state " .. shell_quote(dir))
    assert.are.equal(0, rc2)
    assert.are.same({ g = { found = true, value = { text = "hello", n = 1 } },
                      keys = { "greeting", "other" }, deleted = true, used = 35 }, b.result)
    local c = run("return tools.kv.get{key = 'greeting'}", "")  -- no --state: memory
    assert.is_false(c.result.found)
  end)

  it("takes the directory from the config's state, relative to the config's folder", function()
    local dir = temp_dir()
    write_file(dir .. "/tidepool.json", dkjson.encode({ state = "st" }))
    local a = run("tools.kv.set{key = 'k', value = 1} return true",
                  "--config " .. shell_quote(dir .. "/tidepool.json"))
    assert.is_true(a.ok)
    local f = io.open(dir .. "/st/tidepool.db", "rb")
    assert.is_not_nil(f, "no database in the config's state directory")
    if f then f:close() end
    local b = run("return tools.kv.get{key = 'k'}", "--state " .. shell_quote(dir .. "/st"))
    assert.are.same({ found = true, value = 1 }, b.result)
  end)

  it("a state that is a file is a usage error that names it", function()
    local dir = temp_dir()
    write_file(dir .. "/f", "")
    local _, rc, err = run("return 1", "--state " .. shell_quote(dir .. "/f"))
    assert.are.equal(2, rc)
    assert.are.equal("tidepool: --state: " .. dir .. "/f: not a directory (give a directory "
      .. "for the state, or sqlite:PATH for a database file)\nTry 'tidepool --help'.\n", err)
  end)
end)

describe("tidepool run --state DIR past a file-size limit", function()
  it("refuses the write that met the limit and goes on (SIGXFSZ does not end it)", function()
    local dir = temp_dir()
    local path = os.tmpname()
    write_file(path, [[
      local v = string.rep("x", 2000)
      local n = 0
      for i = 1, 100000 do
        local ok, err = pcall(tools.kv.set, {key = "k" .. i, value = v})
        if not ok then return {n = n, code = err.code, message = err.message} end
        n = n + 1
      end
      return {n = n}]])
    -- dash's ulimit -f counts 512-byte blocks: 400 is 200 KB
    local p = assert(io.popen("ulimit -f 400; " .. BIN .. " run --json --state "
      .. shell_quote(dir) .. " " .. shell_quote(path) .. " 2>/dev/null; echo \"#rc=$?\""))
    local out = p:read("a")
    p:close()
    os.remove(path)
    local rc = tonumber(out:match("#rc=(%d+)\n$"))
    local env = dkjson.decode((out:gsub("#rc=%d+\n$", "")))
    assert.are.equal(0, rc)
    assert.is_true(env.ok)
    assert.is_true(env.result.n > 0 and env.result.n < 100000)
    assert.are.equal("tool.failed", env.result.code)
    assert.is_truthy(env.result.message:find("(the disk is full or a file-size limit was "
      .. "reached: free space, and the next write is tried again)", 1, true))
    os.execute("rm -rf " .. shell_quote(dir))
  end)
end)

describe("rate buckets with --state DIR", function()
  it("are shared by processes: the second run sees the tokens the first took", function()
    local dir = temp_dir()
    local cfg = dir .. "/tidepool.json"
    write_file(cfg, dkjson.encode({ policy = { default = "allow", rules = {
      { tools = "kv.*", effect = "allow",
        rate = { capacity = 3, per_second = 0.001, key = "principal" } } } } }))
    local script = [[
      local out = {}
      for i = 1, 2 do
        local ok, err = pcall(tools.kv.get, {key = "k"})
        out[i] = ok and "ok" or err.code
      end
      return out]]
    local args = "--state " .. shell_quote(dir .. "/st") .. " --config " .. shell_quote(cfg)
      .. " --principal alice"
    local a = run(script, args)
    assert.are.same({ "ok", "ok" }, a.result)
    local b = run(script, args)  -- one token left of 3
    assert.are.same({ "ok", "tool.rate_limited" }, b.result)
    local c = run(script, args .. " --principal bob")  -- bob's bucket is his own
    assert.are.same({ "ok", "ok" }, c.result)
    local d = run(script, "--config " .. shell_quote(cfg) .. " --principal alice")
    assert.are.same({ "ok", "ok" }, d.result)  -- without --state: this process's own
  end)
end)

-- A tidepool mcp on stdio: start(args) -> server; server:call(id, code) sends a run_lua
-- call; server:wait(ids) waits for those answers; server:kill().
local function mcp(args)
  local stdin, stdout, stderr = uv.new_pipe(), uv.new_pipe(), uv.new_pipe()
  local s = { msgs = {}, buf = "", exited = false }
  s.proc = uv.spawn(BIN, { args = args, stdio = { stdin, stdout, stderr } },
    function() s.exited = true end)
  assert(s.proc, "cannot start tidepool mcp")
  stderr:read_start(function() end)
  stdout:read_start(function(_, data)
    if not data then return end
    s.buf = s.buf .. data
    for line in s.buf:gmatch("([^\n]*)\n") do
      local m = dkjson.decode(line)
      if m and m.id then s.msgs[m.id] = m end
    end
    s.buf = s.buf:match("([^\n]*)$")
  end)
  local function send(t) stdin:write(dkjson.encode(t) .. "\n") end
  send({ jsonrpc = "2.0", id = "init", method = "initialize", params = {
    protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "spec",
    version = "1" } } })
  send({ jsonrpc = "2.0", method = "notifications/initialized" })
  function s.call(_, id, code)
    send({ jsonrpc = "2.0", id = id, method = "tools/call", params = { name = "run_lua",
      arguments = { code = code } } })
  end
  function s.wait(_, ids)
    local t0 = uv.hrtime()
    repeat
      local all = true
      for _, id in ipairs(ids) do all = all and s.msgs[id] ~= nil end
      if all then return true end
      uv.run("once")
    until uv.hrtime() - t0 > 20e9
    return false
  end
  function s.kill(_, sig)
    s.proc:kill(sig)
    local t0 = uv.hrtime()
    while not s.exited and uv.hrtime() - t0 < 10e9 do uv.run("once") end
    stdin:close()
    stdout:read_stop()
    stdout:close()
    stderr:close()
    s.proc:close()
    uv.run("nowait")
  end
  return s
end

-- The structured result of a run_lua answer.
local function result_of(m)
  local sc = m.result and m.result.structuredContent
  if sc then return sc end
  return dkjson.decode(m.result.content[1].text)
end

describe("tidepool mcp --state DIR", function()
  it("keeps every write it acknowledged when it is killed with SIGKILL", function()
    local dir = temp_dir()
    local s = mcp({ "mcp", "--state", dir, "--workers", "2" })
    local ids = {}
    for batch = 1, 8 do
      local id = "w" .. batch
      ids[#ids + 1] = id
      s:call(id, ([[
        for i = 1, 25 do
          tools.kv.set{key = ("k%%02d-%%02d"):format(%d, i), value = {batch = %d, i = i}}
        end
        return "batch %d"]]):format(batch, batch, batch))
    end
    assert.is_true(s:wait(ids), "not every batch was answered")
    s:kill("sigkill")  -- at once: nothing gets to close the database
    for _, id in ipairs(ids) do
      assert.is_nil(s.msgs[id].error)
      assert.is_true(result_of(s.msgs[id]).ok, dkjson.encode(s.msgs[id]))
    end
    local t = mcp({ "mcp", "--state", dir })
    t:call("r", [[
      local l = tools.kv.list{limit = 1000}
      local last = tools.kv.get{key = "k08-25"}
      local sum = 0
      for _, k in ipairs(l.keys) do sum = sum + tools.kv.get{key = k}.value.i end
      return {n = #l.keys, sum = sum, last = last.value}]])
    assert.is_true(t:wait({ "r" }), "no answer after the restart")
    t:kill("sigterm")
    local r = result_of(t.msgs.r)
    assert.is_true(r.ok, dkjson.encode(t.msgs.r))
    assert.are.same({ n = 200, sum = 8 * (25 * 26 / 2), last = { batch = 8, i = 25 } },
                    r.result)
  end)
end)

describe("the Lua module's state option", function()
  it("keeps kv keys in the store, where another engine and a process read them", function()
    local tidepool = require("tidepool")
    local dir = temp_dir()
    local a = tidepool.run("tools.kv.set{key = 'm', value = {42}} return true",
                           { builtin_tools = true, state = dir })
    assert.is_true(a.ok)
    local b = run("return tools.kv.get{key = 'm'}.value", "--state " .. shell_quote(dir))
    assert.are.same({ 42 }, b.result)
    local ok, err = pcall(tidepool.run, "return 1", { state = dir .. "/no/such" })
    assert.is_false(ok)
    assert.are.equal("tidepool: option 'state': " .. dir .. "/no/such: cannot make the state "
      .. "directory: No such file or directory", err)
  end)
end)
