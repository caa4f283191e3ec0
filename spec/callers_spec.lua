-- Who may call a tool: the config's tool_settings (engine/host/callers.c), through
-- `tidepool run|describe|config check`. A run of tidepool run is a script's, so a tool
-- kept for direct calls is refused, left out of tools.list, tools.search and the
-- description, and tools.describe says why. The direct side (tidepool mcp
-- --expose-tools) is spec/mcp/callers.mjs.
local dkjson = require "dkjson"

local H = require("spec.helper")

-- Runs the command line ARGS (%s: the config file, written from the table config);
-- returns stdout, stderr and the exit status.
local function sh(config, cmdline, stdin)
  local cpath = H.write_temp(type(config) == "string" and config or dkjson.encode(config))
  local out, err, rc = H.cli(cmdline:format(H.shell_quote(cpath)), stdin or "")
  os.remove(cpath)
  return out, err, rc
end

local function run(config, script)
  local out, err, rc = sh(config, "run --json --config %s -", script)
  local env = dkjson.decode(out)
  assert(type(env) == "table", "not an envelope: " .. out .. err)
  return env, rc
end

local SETTINGS = { tool_settings = {
  ["kv.set"] = { callers = { "direct" } },
  ["time.*"] = { callers = { "script" }, description = "a note" },
  ["kv.**"] = { callers = { "script", "direct" } },
} }

describe("tool_settings callers", function()
  it("a script's call of a tool kept for direct calls is tool.denied, saying how to call it",
    function()
    local env, rc = run(SETTINGS, 'return tools.kv.set{key = "k", value = 1}')
    assert.are.equal(1, rc)
    assert.are.equal("tool.denied", env.error.code)
    assert.are.equal('tools.kv.set may only be called directly, not from a script (the '
      .. 'config\'s tool_settings give it callers ["direct"]): call it as a tool of its own, '
      .. 'outside the script, and pass its result to the script if the script needs it',
      env.error.message)
    assert.are.equal(1, env.error.line)
  end)

  it("pcall catches the refusal; the tool's key is untouched and other tools still work",
    function()
    local env = run(SETTINGS, [[
      local ok, e = pcall(tools.kv.set, {key = "k", value = 1})
      return {ok, e.code, tools.kv.get{key = "k"}.found, math.type(tools.time.now{}.unix_ms)}]])
    assert.is_true(env.ok)
    assert.are.same({ false, "tool.denied", false, "integer" }, env.result)
  end)

  it("scripts do not see it: tools.list and tools.search leave it out, tools.describe says why",
    function()
    local env = run(SETTINGS, [[
      local listed, found = {}, {}
      for _, n in ipairs(tools.list()) do listed[n] = true end
      for _, h in ipairs(tools.search("stores value key")) do found[h.name] = true end
      return {listed["kv.set"] or false, listed["kv.get"] or false, found["kv.set"] or false,
              tools.describe("kv.set"), #tools.list()}]])
    assert.is_true(env.ok)
    assert.are.same({ false, true, false, "-- tools.kv.set may only be called directly, not "
      .. "from a script (the config's tool_settings)\n", 5 }, env.result)
    local all = run("{}", "return #tools.list()")
    assert.are.equal(6, all.result)  -- the same build without settings lists 6
  end)

  it("tidepool describe leaves out the tools a script may not call", function()
    local out, _, rc = sh(SETTINGS, "describe --config %s")
    assert.are.equal(0, rc)
    assert.is_nil(out:find("kv.set", 1, true))
    assert.truthy(out:find("kv.get{", 1, true))
    local plain = sh("{}", "describe --config %s")
    assert.truthy(plain:find("kv.set{", 1, true))
  end)

  it("every matching entry applies: two that share no caller leave the tool none", function()
    local env = run({ tool_settings = { ["kv.*"] = { callers = { "script" } },
                                        ["kv.get"] = { callers = { "direct" } } } },
                    'return tools.kv.get{key = "k"}')
    assert.are.equal("tool.denied", env.error.code)
    assert.are.equal("tools.kv.get may not be called at all: the config's tool_settings "
      .. "leave it no callers", env.error.message)
  end)

  it("a glob with ** reaches every tool under it, and a tool no entry names is open", function()
    local env = run({ tool_settings = { ["kv.**"] = { callers = { "direct" } } } },
                    'local ok = pcall(tools.kv.get, {key = "k"}) '
                    .. 'return {ok, math.type(tools.time.now{}.unix_ms)}')
    assert.is_true(env.ok)
    assert.are.same({ false, "integer" }, env.result)
  end)

  it("config check: every mistake named with its JSON pointer and an example", function()
    local _, out, rc = sh('{"tool_settings": {"kv.set": {"callers": []}, "a-b": {"callers": '
      .. '["script"]}, "x.y": {"callers": ["model"]}, "z": {"caller": ["script"]}}}',
      "config check %s")
    assert.are.equal(2, rc)
    assert.truthy(out:find('/tool_settings: invalid property name "a-b": expected a string '
      .. 'matching /^[A-Za-z0-9_.*]+$/, got "a-b"', 1, true), out)
    assert.truthy(out:find("/tool_settings/kv.set/callers: expected at least 1 item, got 0; "
      .. 'for example "callers": ["direct"]', 1, true), out)
    assert.truthy(out:find('/tool_settings/x.y/callers/0: expected one of "script", '
      .. '"direct"; got "model"', 1, true), out)
    assert.truthy(out:find('/tool_settings/z/caller: unknown field "caller" (did you mean '
      .. '"callers"?)', 1, true), out)
    local ok, _, rc2 = sh(SETTINGS, "config check %s")
    assert.are.equal(0, rc2, ok)
    assert.truthy(ok:find("1 section (tool_settings)", 1, true), ok)
  end)
end)
