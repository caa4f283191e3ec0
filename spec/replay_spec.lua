-- Deterministic runs from the Lua module and the CLI (tidepool.h, "durable and
-- deterministic runs"): `deterministic = true` seeds math.random and gives the run a
-- clock that starts at `clock` and moves `clock_step` at each read, so two runs of one
-- script give the same envelope but for its timings, in one process or in two.
local tidepool = require "tidepool"

local H = require("spec.helper")

-- The envelope's text without its timings ("ms", "cpu_ms", "wall_ms").
local function untimed(text)
  return (text:gsub('"ms":[%d.e-]+', '"ms":'):gsub('"cpu_ms":[%d.e-]+', '"cpu_ms":')
              :gsub('"wall_ms":[%d.e-]+', '"wall_ms":'))
end

-- stdout of `tidepool run ARGS -` with script on standard input.
local function cli(args, script)
  return (H.cli("run " .. args .. " - 2>&1", script))
end

local SCRIPT = [[
local r = {}
for i = 1, 4 do r[i] = math.random(1 << 40) end
local keys = {}
for k in pairs({alpha = 1, beta = 2, gamma = 3, delta = 4, epsilon = 5, zeta = 6, eta = 7}) do
  keys[#keys + 1] = k
end
print(os.date("!%Y-%m-%d %H:%M:%S"), os.clock())
return {r = r, keys = table.concat(keys, ","), now = os.time(), later = os.time()}
]]

describe("tidepool.run with deterministic = true", function()
  it("gives the same envelope twice, timings aside", function()
    local opts = {deterministic = true, seed = 7, clock = 1700000000, json = true}
    local a = tidepool.run(SCRIPT, opts)
    local b = tidepool.run(SCRIPT, opts)
    assert.truthy(a:find('"ok":true', 1, true))
    assert.are.equal(untimed(a), untimed(b))
  end)

  it("reads the clock it was given, moving clock_step at each read", function()
    local env = tidepool.run("return {os.time(), os.clock(), os.date('!%Y-%m-%d'), os.time()}",
                             {deterministic = true, clock = 1700000000, clock_step = 0.5})
    assert.are.same({1700000000, 0.5, "2023-11-14", 1700000001}, env.result)
  end)

  it("starts the clock at 0 and steps 1 ms by default", function()
    local env = tidepool.run("return {os.time(), os.clock(), os.clock()}", {deterministic = true})
    assert.are.same({0, 0.001, 0.002}, env.result)
  end)

  it("draws other numbers with another seed, the same with the same", function()
    local src = "return {math.random(1 << 50), math.random(1 << 50)}"
    local a = tidepool.run(src, {deterministic = true, seed = 1}).result
    local b = tidepool.run(src, {deterministic = true, seed = 2}).result
    local c = tidepool.run(src, {seed = 1}).result
    assert.are_not.same(a, b)
    assert.are.same(a, c)
  end)

  it("reseeds math.randomseed() from the run's seed", function()
    local src = "math.randomseed() local x = math.random(1 << 50) math.randomseed() " ..
                "return {x, math.random(1 << 50)}"
    local a = tidepool.run(src, {deterministic = true, seed = 5}).result
    local b = tidepool.run(src, {deterministic = true, seed = 5}).result
    assert.are.same(a, b)
    assert.are_not.equal(a[1], a[2])
  end)

  it("leaves a run without these options on the system's clock", function()
    local env = tidepool.run("return os.time()")
    assert.is_true(math.abs(env.result - os.time()) <= 5)
  end)

  it("refuses bad values with the option's name", function()
    assert.has_error(function() tidepool.run("return 1", {seed = 1.5}) end,
                     "tidepool: option 'seed' must be an integer")
    assert.has_error(function() tidepool.run("return 1", {clock = "now"}) end,
      "tidepool: option 'clock' must be an integer: seconds since the epoch, e.g. 1700000000")
    assert.has_error(function() tidepool.run("return 1", {clock_step = -1}) end,
                     "tidepool: option 'clock_step' must be seconds from 0 to 86400, e.g. 0.001")
    assert.has_error(function() tidepool.run("return 1", {deterministic = "yes"}) end,
                     "tidepool: option 'deterministic' must be true or false")
  end)
end)

describe("tidepool run --deterministic", function()
  it("prints the same envelope from two processes, pairs() order included", function()
    local args = "--json --deterministic --seed 7 --clock 1700000000"
    local a, b = cli(args, SCRIPT), cli(args, SCRIPT)
    assert.truthy(a:find('"now":1700000000', 1, true))
    assert.truthy(a:find('"logs":["2023-11-14 22:13:20\\t0.001"]', 1, true))
    assert.are.equal(untimed(a), untimed(b))
    -- and the module, in this process, gives the same result as the CLI
    local m = tidepool.run(SCRIPT, {deterministic = true, seed = 7, clock = 1700000000,
                                    json = true})
    assert.are.equal(a:match('"result":(%b{})'), m:match('"result":(%b{})'))
  end)

  it("takes --clock-step as a duration and refuses a bad --seed", function()
    local out = cli("--json --deterministic --clock-step 2s", "return {os.clock(), os.clock()}")
    assert.truthy(out:find('"result":[0.0,2.0]', 1, true))
    out = cli("--seed -3", "return 1")
    assert.truthy(out:find("--seed takes a whole number from 0 (e.g. --seed 7), not '-3'", 1, true))
  end)
end)
