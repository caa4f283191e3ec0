-- Issue 7's time class, measured: how late past its time limit each attack of
-- spec/time_limits_spec.lua ends (late_ms; the bound is limit / 2), and how long the
-- C calls that are bounded by size, not polled, take at the default 64 MiB.
--   LUA_CPATH="build/lua/?.so;;" build/lua/lua bench/time_limits.lua [limit_s]
local tidepool = require "tidepool"
local DIR = "spec/fixtures/time_limits"
local limit = tonumber(arg[1]) or 0.5

local attacks = {
  { "sort_long_strings", [[local s = string.rep("a", 30e6) local t = {}
      for i = 1, 1000 do t[i] = s end table.sort(t)]] },
  { "sort_c_order_function", [[local s = string.rep("a", 30e6) local t = {}
      for i = 1, 1000 do t[i] = s end table.sort(t, string.find)]] },
  { "load_or_chain_1mib", [[return load("return " .. string.rep("x or ", 209000) .. "x")]] },
  { "compile_or_chain_1mib", "return " .. string.rep("x or ", 209000) .. "x" },
  { "format_q_40mb", [[return #string.format("%q", string.rep("\1", 40e6))]], { memory = "512M" } },
  { "os_date_20m_conversions", [[return #os.date(string.rep("%d", 20e6))]], { memory = "512M" } },
  { "validate_arguments", [[local t = {} for i = 1, 100000 do t[i] = i end
      return tools.tl.heavy{ items = t }]], { tools = { DIR } } },
  { "validate_result", [[return tools.tl.heavy_result{ n = 100000 }]], { tools = { DIR } } },
  { "describe_huge_tool", [[return #tools.describe("tl.huge")]], { tools = { DIR } } },
}

tidepool.run("return 1", { tools = { DIR } })  -- loads the fixture's plugins once
for _, a in ipairs(attacks) do
  local opts = { timeout = limit .. "s" }
  for k, v in pairs(a[3] or {}) do opts[k] = v end
  local c0 = os.clock()
  local env = tidepool.run(a[2], opts)
  local spent = math.max(env.stats.wall_ms, (os.clock() - c0) * 1000)
  print(("late_ms_%s: %.0f ms (%s)"):format(a[1], spent - limit * 1000,
    env.ok and "finished" or env.error.code))
end

local calls = {
  { "string_byte_990k", [[local s = string.rep("a", 990000) local t = os.clock()
      local _ = select("#", s:byte(1, -1)) return os.clock() - t]] },
  { "string_sub_30mb", [[local s = string.rep("a", 30e6) local t = os.clock()
      local _ = s:sub(2) return os.clock() - t]] },
  { "string_lower_20mb", [[local s = string.rep("A", 20e6) local t = os.clock()
      local _ = s:lower() return os.clock() - t]] },
  { "string_reverse_20mb", [[local s = string.rep("A", 20e6) local t = os.clock()
      local _ = s:reverse() return os.clock() - t]] },
  { "compare_30mb_strings", [[local s = string.rep("a", 30e6) local t = os.clock()
      local _ = s < s return os.clock() - t]] },
  { "string_unpack_1m", [[local s = string.rep("\0", 1e6) local t = os.clock()
      pcall(string.unpack, string.rep("b", 1e6), s) return os.clock() - t]] },
}
for _, c in ipairs(calls) do
  local env = tidepool.run(c[2])
  print(("call_ms_%s: %s"):format(c[1], env.ok and ("%.1f ms"):format(env.result * 1000)
    or env.error.code))
end
