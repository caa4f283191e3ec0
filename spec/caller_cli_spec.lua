-- tidepool run --caller-tools FILE --caller-cmd CMD (engine/front/caller_pipe.c): the
-- run's caller tools answered by a command as JSON lines on a pipe, for shell users; and
-- tidepool describe --caller-tools, what the model reads of them.
local dkjson = require "dkjson"

local BIN = (os.getenv("BUILD") or "build") .. "/tidepool"

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local temps = {}
local function write_temp(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  temps[#temps + 1] = path
  return path
end
teardown(function() for _, p in ipairs(temps) do os.remove(p) end end)

local function sh(cmdline)
  local errpath = write_temp("")
  local p = assert(io.popen(cmdline .. " 2>" .. errpath .. "; echo \"#rc=$?\"", "r"))
  local out = p:read("a")
  p:close()
  local f = assert(io.open(errpath, "rb"))
  local err = f:read("a")
  f:close()
  local rc = tonumber(out:match("#rc=(%d+)\n$"))
  return out:gsub("#rc=%d+\n$", ""), err, rc
end

local TOOLS = write_temp(dkjson.encode({
  { name = "add", description = "Adds two numbers.",
    inputSchema = { type = "object",
                    properties = { a = { type = "number" }, b = { type = "number" } },
                    required = { "a", "b" } },
    outputSchema = { type = "number" } },
  { name = "crm.find", description = "Finds a customer.", timeoutMs = 500 },
}))

-- The answering command: python3 reads the calls, answers add with a + b, crm.find with
-- an error whose code is tool.denied, and logs every call it saw to LOG.
local function answerer(log, extra)
  local py = write_temp([[
import json, sys
log = open(sys.argv[1], "a")
for line in sys.stdin:
    c = json.loads(line)
    log.write(line)
    log.flush()
    if c["tool"] == "add":
        a = c["args"]
        print(json.dumps({"id": c["id"], "result": a["a"] + a["b"]}), flush=True)
    elif c["args"].get("slow"):
        pass  # never answers
    else:
        print(json.dumps({"id": c["id"], "error": {"message": "no customer " + c["args"]["name"],
                                                   "code": "tool.denied"}}), flush=True)
]] .. (extra or ""))
  return "python3 " .. py .. " " .. log
end

local function run(script, cmd, more)
  local s = write_temp(script)
  local out, err, rc = sh(BIN .. " run --json --no-builtin-tools --caller-tools " .. TOOLS ..
                          (cmd and (" --caller-cmd " .. q(cmd)) or "") .. " " ..
                          (more or "") .. " " .. s)
  return dkjson.decode(out), err, rc, out
end

describe("tidepool run --caller-tools --caller-cmd", function()
  it("sends each call as a JSON line and takes the answers in any order", function()
    local log = write_temp("")
    local env, err, rc = run([[
      local x = tools.add{a = 2, b = 3}
      local p, r = parallel(function() return tools.add{a = 1, b = 1} end,
                            function() return tools.add{a = 10, b = 1} end)
      local ok, e = pcall(tools.crm.find, {name = "ann"})
      return {x, p, r, e.code, e.message}
    ]], answerer(log))
    assert.are.equal("", err)
    assert.are.equal(0, rc)
    assert.are.same({ 5, 2, 11, "tool.denied", "tools.crm.find failed: no customer ann" },
                    env.result)
    local seen = {}
    for line in io.lines(log) do seen[#seen + 1] = dkjson.decode(line) end
    assert.are.equal(4, #seen)
    assert.are.same({ id = 1, tool = "add", args = { a = 2, b = 3 } }, seen[1])
    assert.are.equal("crm.find", seen[4].tool)
    assert.are.equal(4, seen[4].id)
  end)

  it("checks arguments before the command sees them and results after", function()
    local log = write_temp("")
    local env = run([[
      local ok, e = pcall(tools.add, {a = 1})
      return e.code
    ]], answerer(log))
    assert.are.equal("tool.invalid_input", env.result)
    assert.are.equal("", io.open(log):read("a"))
  end)

  it("a call the command does not answer in time fails with tool.timeout", function()
    local log = write_temp("")
    local env = run([[local ok, e = pcall(tools.crm.find, {slow = true}) return e.code]],
                    answerer(log))
    assert.are.equal("tool.timeout", env.result)
  end)

  it("a command that exits fails the calls it had with tool.unavailable", function()
    local env, _, rc = run("return tools.add{a = 1, b = 2}", "exit 3")
    assert.are.equal(1, rc)
    assert.are.equal("tool.unavailable", env.error.code)
    assert.truthy(env.error.message:find("--caller-cmd", 1, true))
  end)

  it("refuses bad use with a usage error", function()
    local _, err, rc = sh(BIN .. " run --caller-tools " .. TOOLS .. " /dev/null")
    assert.are.equal(2, rc)
    assert.truthy(err:find("--caller-tools needs --caller-cmd", 1, true))
    _, err, rc = sh(BIN .. " run --caller-cmd cat /dev/null")
    assert.are.equal(2, rc)
    assert.truthy(err:find("--caller-cmd needs --caller-tools", 1, true))
    local bad = write_temp('[{"name": "time.now"}]')
    _, err, rc = sh(BIN .. " run --caller-tools " .. bad .. " --caller-cmd cat " ..
                    write_temp("return 1"))
    assert.are.equal(2, rc)
    assert.truthy(err:find("caller tool time.now: the server has a tool of that name", 1, true))
  end)
end)

describe("tidepool describe --caller-tools", function()
  it("describes the caller tools beside the server's, as run_lua", function()
    local out, err, rc = sh(BIN .. " describe --no-builtin-tools --format json --describe auto "
                            .. "--caller-tools - < " .. TOOLS)
    assert.are.equal(0, rc, err)
    local tool = dkjson.decode(out)
    assert.truthy(tool.description:find("add", 1, true))
    assert.truthy(tool.description:find("crm.find", 1, true))
    assert.truthy(#tool.description <= 2048)
  end)
end)
