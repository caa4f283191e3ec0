-- A plugin's test with busted, through the tidepool Lua module: the tool runs in a real
-- engine, called by a real script, its schemas checked as in production.
--   LUA_CPATH="build/lua/?.so;;" build/lua/lua /usr/bin/busted examples/plugin/units_spec.lua
local tidepool = require("tidepool")

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local opts = { tools = { here .. "/tools" }, builtin_tools = false, timeout = 5 }

local function run(script) return tidepool.run(script, opts) end

describe("units.convert", function()
  it("converts within a kind", function()
    local env = run('return tools.units.convert{value = 5, from = "km", to = "m"}')
    assert.is_true(env.ok)
    assert.same({ value = 5000, unit = "m" }, env.result)
    assert.same({ "[units.convert] 5 km -> m" }, env.logs)
  end)

  it("fails with tool.failed across kinds, and the script can catch it", function()
    local env = run([[
      local ok, err = pcall(tools.units.convert, {value = 1, from = "kg", to = "m"})
      return {ok = ok, code = err.code, message = err.message}]])
    assert.is_true(env.ok)
    assert.same({ ok = false, code = "tool.failed",
                  message = "tools.units.convert failed: cannot convert kg (mass) to m (length)" },
                env.result)
  end)

  it("refuses a unit it does not know before the handler runs", function()
    local env = run('return tools.units.convert{value = 1, from = "parsec", to = "m"}')
    assert.is_false(env.ok)
    assert.equals("tool.invalid_input", env.error.code)
    assert.matches('$.from: expected one of "cm", "ft", "g", "h", "kg", "km", "lb", "m", '
                   .. '"mi", "min", "s"; got "parsec"', env.error.message, 1, true)
  end)
end)
