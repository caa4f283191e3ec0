-- The engine's logger (tp_engine_on_log) as the Lua module shows it: tidepool.on_log(fn)
-- receives what engines say outside a run's result, here a plugin's print
-- (spec/fixtures/plugins/printer), and nil gives it back to stderr.
describe("tidepool.on_log", function()
  local tidepool = require "tidepool"
  local opts = { tools = { "spec/fixtures/plugins/printer" }, builtin_tools = false }

  after_each(function() tidepool.on_log(nil) end)

  it("hands a plugin's print to the function, with its level and source", function()
    local seen = {}
    tidepool.on_log(function(level, source, message)
      seen[#seen + 1] = { level, source, message }
    end)
    local env = tidepool.run("return tools.printer.say{text = 'hi'}.said", opts)
    assert.are.same({ true, "hi" }, { env.ok, env.result })
    -- the engine of these options is made by this run: the plugin's load prints first
    assert.are.same({ { "info", "plugin", "printer loaded\t1" }, { "info", "plugin", "say:\thi" } },
                    seen)
  end)

  it("keeps the run going when the function raises, and takes only functions or nil", function()
    tidepool.on_log(function() error("a logger that fails") end)
    local env = tidepool.run("return tools.printer.say{text = 'x'}.said", opts)
    assert.are.same({ true, "x" }, { env.ok, env.result })
    local ok, err = pcall(tidepool.on_log, 5)
    assert.is_false(ok)
    assert.matches("function expected, got number", err)
  end)
end)
