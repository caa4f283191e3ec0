-- What the model reads: `tidepool describe` and, inside a script, tools.list,
-- tools.describe and tools.search, all over lua/describe.lua and the engine's registry.
local tidepool = require "tidepool"
local dkjson = require "dkjson"

local H = require("spec.helper")

local function sh(cmd)  -- stdout and the exit status
  local out, _, rc = H.sh(cmd)
  return out, rc
end

local TP = H.BIN

describe("tidepool describe", function()
  it("prints the preamble and every built-in tool's call, the same each time", function()
    local a, code = sh(TP .. " describe")
    assert.are.equal(0, code)
    assert.truthy(a:find("Write one Lua 5.4 script", 1, true))
    assert.truthy(a:find("\nkv.get{ -- Reads the value stored under a key.", 1, true))
    assert.truthy(a:find("\n key: string #1..256 -- The key: 1 to 256 characters.", 1, true))
    assert.truthy(a:find("\ntime.now{", 1, true))
    local b = sh(TP .. " describe")
    assert.are.equal(a, b)
  end)

  it("prints one line per tool with --describe compact", function()
    local out, code = sh(TP .. " describe --describe compact")
    assert.are.equal(0, code)
    assert.are.equal("kv.delete{key} -> {deleted}\nkv.get{key} -> {value, found}\n"
      .. "kv.list{...} -> {keys, truncated}\nkv.set{key, value} -> {bytes, used}\n"
      .. "time.now{} -> {unix_ms, iso}\ntime.sleep{ms} -> {slept_ms}\n",
      out:match("finds tools:\n(.*)$"))
    local json = sh(TP .. " describe --format json --describe compact")
    assert.truthy(dkjson.decode(json).description:find("\nkv.set{key, value} -> {bytes, used}\n",
                                                      1, true))
  end)

  it("refuses an unknown --describe mode with exit status 2", function()
    local _, code = sh(TP .. " describe --describe short")
    assert.are.equal(2, code)
  end)

  it("prints a run_lua tool definition with --format json", function()
    local out, code = sh(TP .. " describe --format json")
    assert.are.equal(0, code)
    local def = dkjson.decode(out)
    assert.are.equal("run_lua", def.name)
    assert.are.same({ "code" }, def.inputSchema.required)
    assert.are.equal("string", def.inputSchema.properties.code.type)
    assert.is_nil(def.inputSchema["$schema"])
    assert.truthy(def.description:find("\nkv.get{", 1, true))
  end)

  it("leaves the built-in tools out with --no-builtin-tools", function()
    local out = sh(TP .. " describe --no-builtin-tools")
    assert.is_nil(out:find("kv.get", 1, true))
  end)

  it("refuses an unknown format with exit status 2", function()
    local _, code = sh(TP .. " describe --format xml")
    assert.are.equal(2, code)
  end)
end)

describe("discovery inside a script", function()
  local opts = { builtin_tools = true }

  it("tools.list names every tool, sorted, as an array", function()
    local env = tidepool.run("return tools.list()", opts)
    assert.is_true(env.ok)
    assert.are.same({ "kv.delete", "kv.get", "kv.list", "kv.set", "time.now", "time.sleep" },
                    { table.unpack(env.result) })
  end)

  it("tools.describe gives the call, fields and result of one tool", function()
    local env = tidepool.run('return tools.describe("time.sleep")', opts)
    assert.is_true(env.ok)
    assert.truthy(env.result:find("^time.sleep{ %-%- Waits the given number of milliseconds"))
    assert.truthy(env.result:find("\n ms: integer 0..60000 -- How long to wait", 1, true))
    assert.truthy(env.result:find("\n} -> {\n slept_ms: integer >=0", 1, true))
    assert.is_nil(env.result:find("kv.", 1, true))
  end)

  it("tools.describe of an unknown tool is a runtime error naming it", function()
    local env = tidepool.run('return tools.describe("nope.x")', opts)
    assert.is_false(env.ok)
    assert.are.equal("runtime", env.error.code)
    assert.truthy(env.error.message:find("no tool nope.x", 1, true))
  end)

  it("tools.search ranks name matches first", function()
    local env = tidepool.run('return tools.search("sleep")', opts)
    assert.is_true(env.ok)
    assert.are.equal("time.sleep", env.result[1].name)
  end)

  it("tools.search with no match is an empty array", function()
    local env = tidepool.run('local r = tools.search("zzzz") return #r, json.encode(r)', opts)
    assert.is_true(env.ok)
    assert.are.same({ 0, "[]" }, { env.result[1], env.result[2] })
  end)
end)
