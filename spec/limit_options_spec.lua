-- Every limit is set the same way from every front end, from one table (engine/core/limits.c):
-- `tidepool run` takes each as a flag (the tool-call limits included), lists each in
-- --help with its default, and refuses an overflowing, negative or malformed value with
-- a usage error that says so; the Lua module takes the same limits by their Lua names.
-- Fixture tools: spec/fixtures/tools_calls (fx.*).
local dkjson = require "dkjson"
local tidepool = require "tidepool"

local BIN = (os.getenv("BUILD") or "build") .. "/tidepool"
local FX = "--no-builtin-tools --tools spec/fixtures/tools_calls"

-- Runs `tidepool run ARGS -` with script on standard input (ARGS alone when nofile);
-- returns stdout, stderr, status.
local function sh(args, script, nofile)
  local inpath, errpath = os.tmpname(), os.tmpname()
  local f = assert(io.open(inpath, "wb"))
  f:write(script or "return 1")
  f:close()
  local cmd = BIN .. " run " .. args .. (nofile and "" or " -")
  local p = assert(io.popen(cmd .. " <" .. inpath .. " 2>" .. errpath .. "; echo \"#rc=$?\"", "r"))
  local out = p:read("a")
  p:close()
  f = assert(io.open(errpath, "rb"))
  local err = f:read("a")
  f:close()
  os.remove(inpath)
  os.remove(errpath)
  local rc = tonumber(out:match("#rc=(%d+)\n$"))
  return (out:gsub("#rc=%d+\n$", "")), err, rc
end

local function envelope(args, script)
  local out, err, rc = sh("--json " .. args, script)
  local env = dkjson.decode(out)
  assert.is_table(env, "not JSON: " .. out .. err)
  return env, rc
end

-- The exact usage error of `tidepool run ARGS -`: status 2, nothing on stdout.
local function usage_error(args, message, nofile)
  local out, err, rc = sh(args, nil, nofile)
  assert.are.equal(2, rc, args)
  assert.are.equal("", out)
  assert.are.equal("tidepool: " .. message .. "\nTry 'tidepool --help'.\n", err)
end

describe("the tool-call limits of tidepool run", function()
  it("--tool-calls 3: a script making 4 calls stops at the fourth with limit.tool_calls", function()
    local env, rc = envelope(FX .. " --tool-calls 3",
                             "for i = 1, 4 do tools.fx.echo{i = i} end return true")
    assert.are.equal(1, rc)
    assert.are.equal("limit.tool_calls", env.error.code)
    assert.are.equal("the script made more than its limit of 3 tool calls", env.error.message)
    assert.are.equal(4, #env.calls)
    assert.are.equal("limit.tool_calls", env.calls[4].error)
  end)

  it("--tool-calls 3: three calls succeed", function()
    local env, rc = envelope(FX .. " --tool-calls=3",
                             "for i = 1, 3 do tools.fx.echo{i = i} end return true")
    assert.are.equal(0, rc)
    assert.is_true(env.ok)
  end)

  it("--tool-calls-per-tool 2: the third call of one tool stops the run", function()
    local env = envelope(FX .. " --tool-calls-per-tool 2",
                         "tools.fx.echo{} tools.fx.big{n = 1} tools.fx.echo{} tools.fx.echo{}")
    assert.are.equal("limit.tool_calls", env.error.code)
    assert.are.equal("the script called tools.fx.echo more than its limit of 2 calls of one tool",
                     env.error.message)
    assert.are.equal(4, #env.calls)
  end)

  it("--tool-in-flight 2: five parallel calls run at most two at a time", function()
    local env = envelope(FX .. " --tool-in-flight 2", [[
      local fs = {}
      for i = 1, 5 do fs[i] = function() return tools.fx.nap{ms = 20, tag = tostring(i)}.tag end end
      return {parallel(table.unpack(fs))}
    ]])
    assert.are.same({ "1", "2", "3", "4", "5" }, env.result)
    local running, most = 0, 0
    for _, line in ipairs(env.logs) do
      running = running + (line:match("%] start") and 1 or -1)
      if running > most then most = running end
    end
    assert.are.equal(2, most)
  end)

  it("--tool-bytes 100: a result over it is tool.invalid_output, arguments tool.invalid_input",
    function()
    local env = envelope(FX .. " --tool-bytes 100", [[
      local a = tools.fx.big{n = 80}
      local ok, e = pcall(tools.fx.big, {n = 100})
      local ok2, e2 = pcall(tools.fx.echo, {s = string.rep("y", 200)})
      return {#a.s, ok, e.code, ok2, e2.code}
    ]])
    assert.are.same({ 80, false, "tool.invalid_output", false, "tool.invalid_input" }, env.result)
  end)

  it("--tool-timeout 500ms: a call that sleeps 5 s fails with tool.timeout; the run goes on",
    function()
    local env = envelope(FX .. " --tool-timeout 500ms", [[
      local ok, e = pcall(tools.fx.nap, {ms = 5000})
      return {ok, e.code, e.message}
    ]])
    assert.are.same({ false, "tool.timeout",
      "tools.fx.nap timed out after 500ms (the tool_timeout limit, --tool-timeout)" },
                    env.result)
    assert.is_true(env.calls[1].ms >= 450 and env.calls[1].ms < 4000, env.calls[1].ms)
  end)
end)

describe("limit values of tidepool run that are refused", function()
  it("a size that overflows 64 bits is a usage error, not a wrapped limit", function()
    usage_error("--memory 99999999999999999999G",
      "--memory: bad size '99999999999999999999G' (too large: at most 18446744073709551615 bytes)")
    usage_error("--max-output 17179869184G",
      "--max-output: bad size '17179869184G' (too large: at most 18446744073709551615 bytes)")
  end)

  it("a duration that overflows a double is a usage error", function()
    usage_error("--timeout 1e400s",
      "--timeout: bad duration '1e400s' (too large: at most 1000000000 s)")
    usage_error("--tool-timeout 1000000001s",
      "--tool-timeout: bad duration '1000000001s' (too large: at most 1000000000 s)")
  end)

  it("a count above its 32-bit field is a usage error, not a truncated limit", function()
    usage_error("--tool-calls 4294967296",
      "--tool-calls: bad count '4294967296' (too large: at most 4294967295)")
    usage_error("--tool-in-flight 99999999999999999999",
      "--tool-in-flight: bad count '99999999999999999999' (too large: at most 4294967295)")
  end)

  it("a negative value is a usage error that says so", function()
    usage_error("--cpu -1", "--cpu: bad duration '-1' (it cannot be negative; 0 means no limit)")
    usage_error("--tool-bytes -1",
      "--tool-bytes: bad size '-1' (it cannot be negative; 0 means no limit)")
    usage_error("--tool-calls-per-tool=-2",
      "--tool-calls-per-tool: bad count '-2' (it cannot be negative; 0 means no limit)")
    usage_error("--instructions -5",
      "--instructions: bad instruction count '-5' (it cannot be negative; 0 means no limit)")
  end)

  it("what strtod or strtoull alone would take is malformed", function()
    usage_error("--timeout inf", "--timeout: bad duration 'inf' (use 500ms, 2s, 1m)")
    usage_error("--timeout nan", "--timeout: bad duration 'nan' (use 500ms, 2s, 1m)")
    usage_error("--cpu 0x10", "--cpu: bad duration '0x10' (use 500ms, 2s, 1m)")
    usage_error("--tool-calls 1e3", "--tool-calls: bad count '1e3' (use a whole number)")
    usage_error("'--memory= 64M'",
      "--memory: bad size ' 64M' (use bytes or a suffix: 512K, 64M, 1G)")
  end)

  it("a new flag without its value, and an unknown one, are usage errors", function()
    usage_error("--tool-calls", "option '--tool-calls' needs a value", true)
    usage_error("--tool-call 3", "unknown option '--tool-call'")
  end)
end)

describe("tidepool --help and tidepool mcp --help", function()
  local limits = {
    { "--memory SIZE", "64M" }, { "--instructions N", "none" }, { "--cpu DURATION", "10s" },
    { "--timeout DURATION", "10s" }, { "--max-output SIZE", "1M" },
    { "--max-source SIZE", "1M" }, { "--max-result SIZE", "4M" },
    { "--tool-calls N", "1000" }, { "--tool-calls-per-tool N", "none" },
    { "--tool-in-flight N", "32" }, { "--tool-bytes SIZE", "4M" },
    { "--tool-timeout DURATION", "30s" }, { "--fs-quota SIZE", "64M" },
  }
  for _, cmd in ipairs{ "--help", "mcp --help" } do
    it(cmd .. " lists every limit once, in the table's order, with its default", function()
      local p = assert(io.popen(BIN .. " " .. cmd))
      local out = p:read("a")
      p:close()
      local at = 1
      for _, l in ipairs(limits) do
        local s, e = out:find("\n  " .. l[1], at, true)
        assert.truthy(s, l[1])
        assert.is_nil(out:find("\n  " .. l[1] .. " ", e, true), l[1] .. " twice")
        local line_end = out:find("(default", e, true)
        local default = out:sub(line_end, out:find(")", line_end, true))
        -- tidepool mcp's own default: a result a model reads is smaller (mcp.c)
        local want = (cmd == "mcp --help" and l[1] == "--max-result SIZE") and "80K" or l[2]
        assert.are.equal(("(default %s)"):format(want), default, l[1])
        at = e
      end
    end)
  end
end)

describe("the Lua module's limit options", function()
  local DIR = "spec/fixtures/tools_calls"

  it("tool_calls = 3 stops a script's fourth call with limit.tool_calls", function()
    local env = tidepool.run("for i = 1, 4 do tools.fx.echo{i = i} end return true",
                             { tools = { DIR }, tool_calls = 3 })
    assert.are.equal("limit.tool_calls", env.error.code)
    assert.are.equal("the script made more than its limit of 3 tool calls", env.error.message)
  end)

  it("sizes, counts and durations take numbers and the same strings as the CLI", function()
    local env = tidepool.run("return 1", { memory = "16MiB", max_output = "1K", cpu = 2,
      timeout = "1.5s", instructions = 100000, tool_calls = "10", tool_timeout = "1m",
      fs_quota = "4K", tool_bytes = 4096 })
    assert.is_true(env.ok)
    assert.are.equal(1, env.result)
  end)

  it("a count above its 32-bit field is an error, not a truncated limit", function()
    assert.has_error(function() tidepool.run("return 1", { tool_calls = 4294967296 }) end,
      "tidepool: option 'tool_calls': bad count '4294967296' (too large: at most 4294967295)")
    assert.has_error(function() tidepool.run("return 1", { tool_in_flight = "4294967296" }) end,
      "tidepool: option 'tool_in_flight': bad count '4294967296' (too large: at most 4294967295)")
  end)

  it("a size that overflows is an error, not a wrapped limit", function()
    assert.has_error(function() tidepool.run("return 1", { memory = "17179869184G" }) end,
      "tidepool: option 'memory': bad size '17179869184G' (too large: at most "
      .. "18446744073709551615 bytes)")
  end)

  it("a duration that overflows, or is negative, is an error", function()
    assert.has_error(function() tidepool.run("return 1", { timeout = "1e400s" }) end,
      "tidepool: option 'timeout': bad duration '1e400s' (too large: at most 1000000000 s)")
    assert.has_error(function() tidepool.run("return 1", { timeout = 1e300 }) end,
      "tidepool: option 'timeout': bad duration '1e+300' (too large: at most 1000000000 s)")
    assert.has_error(function() tidepool.run("return 1", { cpu = -1 }) end,
      "tidepool: option 'cpu' must be >= 0 seconds")
    assert.has_error(function() tidepool.run("return 1", { tool_timeout = 0/0 }) end,
      "tidepool: option 'tool_timeout' must be >= 0 seconds")
  end)

  it("a size or count that is not a whole number is an error", function()
    assert.has_error(function() tidepool.run("return 1", { tool_bytes = 1.5 }) end,
      "tidepool: option 'tool_bytes' must be a non-negative integer")
    assert.has_error(function() tidepool.run("return 1", { memory = "12Q" }) end,
      "tidepool: option 'memory': bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)")
    assert.has_error(function() tidepool.run("return 1", { memory = true }) end,
      "tidepool: option 'memory' must be a number or a string")
  end)

  it("an unknown option is an error that lists every option, from the table", function()
    assert.has_error(function() tidepool.run("return 1", { tool_call = 3 }) end,
      "tidepool: unknown option 'tool_call' (memory, instructions, cpu, timeout, max_output, "
      .. "max_source, max_result, tool_calls, tool_calls_per_tool, tool_in_flight, tool_bytes, "
      .. "tool_timeout, fs_quota, tools, builtin_tools, workspace, workspace_max, json, config, "
      .. "state, deterministic, seed, clock, clock_step, caller_tools)")
  end)

  it("json = true returns the envelope as the engine's JSON text (tidepool run --json)", function()
    local script = 'print("a\\tb") return { list = {1, 2.5, 1e300}, empty = json.array({}), '
      .. 'obj = {}, n = json.null, big = math.maxinteger }'
    local text, warnings = tidepool.run(script, { json = true, memory = "8M" })
    assert.is_string(text)
    assert.is_nil(warnings)
    local out = sh("--json --no-builtin-tools", script)
    local function strip(t) return (t:gsub(',"stats":{[^}]*}', ""):gsub("\n$", "")) end
    assert.are.equal(strip(out), strip(text))
    assert.are.equal('{"ok":true,"result":{"big":9223372036854775807,"empty":[],"list":[1,2.5,'
      .. '1e+300],"n":null,"obj":{}},"logs":["a\\tb"],"calls":[]}', strip(text))
    local failed = tidepool.run("return (", { json = true })
    assert.truthy(failed:find('^{"ok":false,"error":{"code":"syntax"'))
  end)
end)
