-- "No run ends more than half its time limit late", for the work a script makes the
-- host do in one C call or outside the VM: table.sort, load and the script's own compile,
-- string.format, os.date, schema validation of tool arguments and results, discovery.
-- Each case would run seconds past its limit without the bound it tests. Limits are
-- 0.5 s or more; a run must end within limit + limit / 2 + 1 s (a loaded machine), of
-- CPU and, times the run's wall / CPU ratio when the machine is loaded, of wall time.
local tidepool = require "tidepool"

local DIR = "spec/fixtures/time_limits"

-- Runs src, which must stop with code; checks its wall time (the envelope's) and the CPU
-- time this process spent on it (which includes compiling, before the run's clock).
local function stops(src, code, opts)
  opts = opts or {}
  opts.timeout = opts.timeout or "0.5s"
  local limit = tonumber((opts.timeout:gsub("s$", "")))
  local c0 = os.clock()
  local env = tidepool.run(src, opts)
  local cpu = os.clock() - c0
  assert.is_false(env.ok, "the run should have failed with " .. code)
  assert.are.equal(code, env.error.code, env.error.message)
  local bound = limit * 1.5 + 1
  -- On a loaded machine the run gets a share of a core: the work between two checks of
  -- its clock takes that much longer in wall time, so the wall allowance past the limit
  -- grows by the run's own wall / CPU ratio (1 on an idle machine). The CPU bound does not.
  local slow = math.max(1, env.stats.wall_ms / math.max(env.stats.cpu_ms, 1))
  local wall_bound = limit + (bound - limit) * slow
  assert.is_true(env.stats.wall_ms < wall_bound * 1000,
    ("wall %.0f ms for a %.1f s limit (%.0f ms of CPU)"):format(env.stats.wall_ms, limit,
      env.stats.cpu_ms))
  assert.is_true(cpu < bound, ("cpu %.2f s for a %.1f s limit"):format(cpu, limit))
  return env
end

local function ok(src, opts)
  local env = tidepool.run(src, opts)
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message))
  return env.result, env
end

describe("table.sort", function()
  it("of long equal strings in the default order stops at the time limit", function()
    -- one comparison reads 30 MB; Lua's sort of 1000 of them ran 7 s past a 10 s limit
    stops([[
      local s = string.rep("a", 30e6)
      local t = {}
      for i = 1, 1000 do t[i] = s end
      table.sort(t)]], "limit.time")
  end)

  it("of under 1024 values with a slow order function stops at the time limit", function()
    stops([[
      local t = {}
      for i = 1, 1000 do t[i] = i end
      table.sort(t, function(a, b) for _ = 1, 1e6 do end return a < b end)]], "limit.time")
  end)

  it("of under 1024 long strings with an order function in C stops at the time limit", function()
    stops([[
      local s = string.rep("a", 30e6)
      local t = {}
      for i = 1, 1000 do t[i] = s end
      table.sort(t, string.find)]], "limit.time")
  end)

  it("of under 1024 values with a slow __lt stops at the time limit", function()
    stops([[
      local mt = { __lt = function(a, b) for _ = 1, 1e6 do end return a.v < b.v end }
      local t = {}
      for i = 1, 1000 do t[i] = setmetatable({ v = i }, mt) end
      table.sort(t)]], "limit.time")
  end)

  it("still sorts like Lua", function()
    local r = ok([[
      local a, b, c = {}, {}, {}
      for i = 1, 1500 do a[i] = (i * 7919) % 1500 end
      for i = 1, 500 do b[i] = ("k%04d"):format((i * 31) % 500) end
      for i = 1, 300 do c[i] = string.rep("z", 300 + (i * 17) % 300) end
      table.sort(a) table.sort(b, function(x, y) return x > y end) table.sort(c)
      return { a[1], a[1500], b[1], b[500], #c[1], #c[300] }]])
    assert.are.same({ 0, 1499, "k0499", "k0000", 300, 599 }, r)
  end)
end)

describe("load", function()
  it("of a 1 MiB 'x or x or ...' chain stops at the time limit", function()
    -- Lua's parser is quadratic on it: 60 s to compile
    stops([[return load("return " .. string.rep("x or ", 209000) .. "x")]], "limit.time")
  end)

  it("of a long elseif chain from a reader function stops at the time limit", function()
    stops([[
      local n = 0
      return load(function()
        n = n + 1
        if n == 1 then return "if x then " end
        if n < 70000 then return "elseif x then " end
        if n == 70000 then return "end" end
      end)]], "limit.time")
  end)

  it("counts a reader function's pieces against the source limit", function()
    local r = ok([[
      local f, err = load(function() return "-- a comment line\n" end)
      return { f == nil, err }]], { max_source = "64K" })
    assert.are.same(
      { true, "chunk of more than 65536 bytes is over the 65536-byte source limit" }, r)
  end)

  it("still loads text from strings and readers, with an environment", function()
    local r = ok([[
      local i = 0
      local f = load(function() i = i + 1 return ({ "return ", "x ", "+ 1" })[i] end,
                     "=r", "t", { x = 41 })
      local g = load("return ...", "=s")
      return { f(), g(7), select(2, load("return +")) }]])
    assert.are.same({ 42, 7, [[[string "return +"]:1: unexpected symbol near '+']] }, r)
  end)
end)

describe("the script's own compile", function()
  it("of a 1 MiB 'x or x or ...' chain stops at the time limit", function()
    local src = "return " .. string.rep("x or ", 209000) .. "x"
    stops(src, "limit.time")
  end)
end)

describe("string.format", function()
  it("%q of a 40 MB string stops at the time limit", function()
    stops([[return #string.format("%q", string.rep("\1", 40e6))]], "limit.time",
      { memory = "512M" })
  end)

  it("%s of a value whose __tostring loops stops at the time limit", function()
    stops([[
      local v = setmetatable({}, { __tostring = function() while true do end end })
      return string.format(string.rep("%s", 100), table.unpack({ v }, 1, 100))]], "limit.time")
  end)

  it("long formats and long %q give Lua's results", function()
    local r = ok([[
      local n = {}
      for i = 1, 1000 do n[i] = i end
      local a = string.format(string.rep("%d,", 1000), table.unpack(n))
      local s = string.rep("a\0" .. "1\n\"", 30000)
      local q = string.format("%q", s)
      return { a == table.concat(n, ",") .. ",",
               q == '"' .. string.rep('a\\0001\\\n\\"', 30000) .. '"',
               select(2, pcall(function()
                 return string.format(string.rep("%d ", 100), table.unpack(n, 1, 99))
               end)) }]])
    assert.are.same({ true, true, "script:9: bad argument #101 to 'format' (no value)" }, r)
  end)
end)

describe("os.date", function()
  it("a format of 20 M conversions stops at the time limit", function()
    stops([[return #os.date(string.rep("%d", 20e6))]], "limit.time", { memory = "512M" })
  end)

  it("a long format gives Lua's result", function()
    local r = ok([[
      local f = string.rep("%Y-%m-%d %H:%M:%S|", 1000)
      return { os.date("!" .. f, 86400) == string.rep("1970-01-02 00:00:00|", 1000),
               select(2, pcall(function() return os.date(string.rep("x", 5000) .. "%Q") end)) }]])
    assert.are.same(
      { true, "script:3: bad argument #1 to 'date' (invalid conversion specifier '%Q')" }, r)
  end)
end)

describe("long text functions done in pieces", function()
  it("utf8.len of long text counts and fails like Lua", function()
    local r = ok([[
      local s = string.rep("a\u{E9}\u{20AC}\u{1F600}", 300000)
      local bad = string.rep("a", 1048575) .. "\xed\xa0\x80b"
      local run = string.rep("a", 1048570) .. string.rep("\x80", 20)
      return { utf8.len(s), utf8.len(s, -1000), select(2, utf8.len(s, 5, -3)),
               select(2, utf8.len(bad)), utf8.len(bad, 1, -1, true), select(2, utf8.len(run)) }]])
    assert.are.same({ 1200000, 400, 5, 1048576, 1048577, 1048571 }, r)
  end)

  it("string.find of long text finds what Lua finds", function()
    local r = ok([[
      local s = string.rep("a", 1048576) .. "xyz" .. string.rep("a", 3e6)
      local t = string.rep("a", 3e6) .. "b"
      return { s:find("axyza", 1, true), s:find("xyz", 2^21, true) or 0,
               t:find(string.rep("a", 2e6) .. "b", 1, true) }]])
    assert.are.same({ 1048576, 0, 1000001, 3000001 }, r)
  end)
end)

describe("schema validation", function()
  it("of uniqueItems over 200 k items finishes quickly", function()
    -- comparing every pair took minutes
    local r = ok([[
      local t = {}
      for i = 1, 200000 do t[i] = i end
      return tools.tl.unique{ items = t }.n]], { tools = { DIR }, timeout = "5s" })
    assert.are.equal(200000, r)
  end)

  it("reports the first equal pair of uniqueItems", function()
    local env = tidepool.run([[
      local t = {}
      for i = 1, 1000 do t[i] = { k = i } end
      t[1001] = { k = 7.0 }
      return tools.tl.unique{ items = t }]], { tools = { DIR } })
    assert.is_false(env.ok)
    assert.are.equal("tool.invalid_input", env.error.code)
    assert.truthy(env.error.message:find("items 6 and 1000 are equal", 1, true), env.error.message)
  end)

  it("of costly arguments stops at the time limit", function()
    local env = stops([[
      local t = {}
      for i = 1, 100000 do t[i] = i end
      return tools.tl.heavy{ items = t }]], "limit.time", { tools = { DIR } })
    assert.are.equal("limit.time", env.calls[1].error)
  end)

  it("of a costly result stops at the time limit", function()
    stops([[return tools.tl.heavy_result{ n = 100000 }]], "limit.time", { tools = { DIR } })
  end)

  it("reports at most 8 errors of the first 20, then how many more", function()
    local env = tidepool.run([[
      local t = {}
      for i = 1, 100 do t[i] = "x" end
      return tools.tl.heavy{ items = t }]], { tools = { DIR }, timeout = 60, cpu = 60 })
    -- (generous limits: the check is about the message, and takes 5-9 s under ASan)
    assert.are.equal("tool.invalid_input", env.error.code)
    assert.truthy(env.error.message:find(
      "$.items[7]: expected integer, got string \"x\"; and 92 more (", 1, true), env.error.message)
  end)
end)

describe("discovery", function()
  it("tools.search refuses a query over 1024 bytes", function()
    local env = tidepool.run([[return tools.search(string.rep("a ", 1e6))]], { tools = { DIR } })
    assert.is_false(env.ok)
    assert.are.equal("runtime", env.error.code)
    assert.are.equal("tools.search: the query is 2000000 bytes, over the limit of 1024: search "
      .. "with a few words", env.error.message)
  end)

  it("tools.search returns at most 50 tools with descriptions cut at 1000 bytes", function()
    local r = ok([[
      local hits = tools.search("widget")
      return { #hits, #hits[1].description, hits[1].name, utf8.len(hits[1].description) ~= nil }]],
      { tools = { DIR } })
    assert.are.same({ 50, 1003, "tl.many01", true }, r)
  end)

  it("tools.describe of a huge name is an error that quotes 64 bytes of it", function()
    local env = tidepool.run([[return tools.describe(string.rep("n", 1e7))]], { tools = { DIR } })
    assert.are.equal("runtime", env.error.code)
    assert.are.equal("tools.describe: there is no tool " .. string.rep("n", 64)
      .. "... (tools.list() lists them)", env.error.message)
  end)

  it("tools.describe of a tool with a huge schema reads the short text made when it was "
    .. "registered", function()
    -- writing its 5.7 MB of LuaCATS would take 1.6 s in the host state: registration
    -- gives up on it early, and a script's describe runs no Lua at all
    local r = ok([[return tools.describe("tl.huge")]], { tools = { DIR } })
    assert.are.equal("---Takes 100 000 documented properties.\n"
      .. "---@param args table (its schema is too large to annotate)\n"
      .. "---@return any\nfunction tools.tl.huge(args) end\n", r)
  end)
end)
