-- Caller tools in the Lua module (engine/front/luamod.c, docs/caller-tools.md): Lua
-- functions of the host as tools of one run, with their schemas. The script calls them as
-- any tool; the handler gets the checked arguments and its result or error goes back.
local tidepool = require("tidepool")

local weather = {
  description = "Current weather for a city.",
  input = { type = "object", properties = { city = { type = "string", minLength = 1 } },
            required = { "city" } },
  output = { type = "object", properties = { temp_c = { type = "number" } },
             required = { "temp_c" } },
}

local function with(handler, extra)
  local t = {}
  for k, v in pairs(weather) do t[k] = v end
  t.handler = handler
  for k, v in pairs(extra or {}) do t[k] = v end
  return { weather = t }
end

describe("caller tools in the Lua module", function()
  it("hands the script's calls to a host function and returns its result", function()
    local seen = {}
    local env = tidepool.run([[
      local a = tools.weather{city = "Paris"}
      local b, c = parallel(function() return tools.weather{city = "Oslo"} end,
                            function() return tools.weather{city = "Rome"} end)
      return {a.temp_c, b.temp_c, c.temp_c}
    ]], { caller_tools = with(function(args)
      seen[#seen + 1] = args.city
      return { temp_c = #args.city }
    end) })
    assert.is_true(env.ok)
    assert.same({ 5, 4, 4 }, env.result)
    assert.same({ "Paris", "Oslo", "Rome" }, seen)
    assert.equal("weather", env.calls[1].tool)
    assert.equal(3, #env.calls)
  end)

  it("turns error('text') into tool.failed and error{code=...} into that code", function()
    local env = tidepool.run([[
      local ok1, e1 = pcall(tools.weather, {city = "Atlantis"})
      local ok2, e2 = pcall(tools.weather, {city = "Moscow"})
      return {e1.code, e1.message, e2.code, e2.message}
    ]], { caller_tools = with(function(args)
      if args.city == "Moscow" then error({ code = "tool.denied", message = "not there" }) end
      error("no such city", 0)
    end) })
    assert.is_true(env.ok)
    assert.same({ "tool.failed", "tools.weather failed: no such city",
                  "tool.denied", "tools.weather was denied: not there" }, env.result)
  end)

  it("checks the arguments before the handler and the result after it", function()
    local called = 0
    local env = tidepool.run([[
      local ok1, e1 = pcall(tools.weather, {city = ""})
      local ok2, e2 = pcall(tools.weather, {city = "x"})
      return {e1.code, e2.code}
    ]], { caller_tools = with(function()
      called = called + 1
      return { temp_c = "warm" }
    end) })
    assert.same({ "tool.invalid_input", "tool.invalid_output" }, env.result)
    assert.equal(1, called)
  end)

  it("describes and lists them, and no other run sees them", function()
    local env = tidepool.run(
      [[return {tools.describe("weather"), tools.search("weather")[1].name}]],
      { caller_tools = with(function() return { temp_c = 1 } end), builtin_tools = false })
    assert.truthy(env.result[1]:find("Current weather for a city.", 1, true))
    assert.equal("weather", env.result[2])
    local other = tidepool.run([[return tools.weather{city = "x"}]], { builtin_tools = false })
    assert.is_false(other.ok)
    assert.equal("tool.unknown", other.error.code)
  end)

  it("counts the handler's time against the run's time limit", function()
    local env = tidepool.run([[tools.weather{city = "x"} return 1]],
      { timeout = 0.5, caller_tools = with(function()
          local t0 = os.clock()
          while os.clock() - t0 < 0.7 do end
          return { temp_c = 1 }
        end) })
    assert.is_false(env.ok)
    assert.equal("limit.time", env.error.code)
  end)

  it("stops a handler past its own timeout with tool.timeout, puts the host's hook back", function()
    local function mine() end
    debug.sethook(mine, "", 1000000)
    local env = tidepool.run([[
      local ok, e = pcall(tools.weather, {city = "x"})
      return {ok, e.code, e.message, tools.weather{city = "y"}.temp_c}
    ]], { timeout = 30, caller_tools = with(function(args)
      if args.city == "x" then while true do end end
      return { temp_c = 7 }
    end, { timeout = 0.3 }) })
    local hook, mask, count = debug.gethook()
    debug.sethook()
    assert.is_true(env.ok, env.error and env.error.message)
    assert.same({ false, "tool.timeout",
                  "tools.weather timed out: the host's handler ran past its timeout of 0.3 s", 7 },
                env.result)
    assert.equal(mine, hook)
    assert.equal("", mask)
    assert.equal(1000000, count)
  end)

  it("bounds a handler by the run's tool timeout when the tool has none", function()
    local env = tidepool.run([[
      local ok, e = pcall(tools.weather, {city = "x"})
      return e.code
    ]], { timeout = 30, tool_timeout = 0.25, caller_tools = with(function()
      while true do end
    end) })
    assert.is_true(env.ok, env.error and env.error.message)
    assert.equal("tool.timeout", env.result)
  end)

  it("refuses bad declarations with a message that names the tool", function()
    assert.has_error(function()
      tidepool.run("return 1", { caller_tools = { weather = { description = "x" } } })
    end, "tidepool: caller_tools.weather.handler must be a function(args)")
    assert.has_error(function()
      tidepool.run("return 1", { caller_tools = { ["bad-name"] = { handler = print } } })
    end)
    assert.has_error(function()
      tidepool.run("return 1", { caller_tools = { time = { handler = print, input = 5 } } })
    end, "tidepool: caller_tools.time.input must be a JSON Schema (a table, or its JSON text)")
    local ok, err = pcall(tidepool.run, "return 1",
      { caller_tools = { ["time.now"] = { handler = print } } })
    assert.is_false(ok)
    assert.truthy(err:find("the server has a tool of that name already", 1, true))
  end)

  it("a handler's result JSON cannot hold fails the call, not the host", function()
    local env = tidepool.run([[local ok, e = pcall(tools.weather, {city = "x"}) return e.message]],
      { caller_tools = with(function() return { temp_c = print } end) })
    assert.equal("tools.weather failed: the host's handler returned a value JSON cannot hold "
                 .. "(a function?), which JSON cannot hold", env.result)
  end)
end)
