-- The sandbox's globals and library keys, exactly: nothing missing, nothing extra.
-- The expected lists are sandbox/allowlist.h's KEEP, WRAP and OURS entries, plus the library
-- tables and _G.
local tidepool = require "tidepool"

local function names_of(expr)
  local env = tidepool.run(([[
    local names = {}
    for k in pairs(%s) do names[#names + 1] = tostring(k) end
    table.sort(names)
    return table.concat(names, " ")
  ]]):format(expr))
  assert(env.ok, env.error and env.error.message)
  return env.result
end

local expected = {
  _G = "_G _VERSION assert collectgarbage coroutine error getmetatable ipairs json load "
    .. "math next os pairs parallel pcall print rawequal rawget rawlen rawset select "
    .. "setmetatable string table tonumber tools tostring type utf8 warn xpcall",
  string = "byte char find format gmatch gsub len lower match pack packsize rep reverse sub "
    .. "unpack upper",
  table = "concat insert move pack remove sort unpack",
  math = "abs acos asin atan ceil cos deg exp floor fmod huge log max maxinteger min "
    .. "mininteger modf pi rad random randomseed sin sqrt tan tointeger type ult",
  utf8 = "char charpattern codepoint codes len offset",
  coroutine = "close create isyieldable resume running status wrap yield",
  os = "clock date difftime time",
  json = "array decode encode null",
}

-- Reads sandbox/allowlist.h: lib -> sorted names of its KEEP and WRAP entries.
local function allowlist_header()
  local f = assert(io.open("sandbox/allowlist.h"))
  local text = f:read("a")
  f:close()
  local libs = {}
  for lib, name, kind in text:gmatch('{%s*"([%w_]+)",%s*"([%w_]+)",%s*TP_(%u+)') do
    if kind ~= "DROP" then
      libs[lib] = libs[lib] or {}
      table.insert(libs[lib], name)
    end
  end
  return libs
end

describe("the sandbox's allowlist", function()
  for lib, names in pairs(expected) do
    it("has exactly the expected keys in " .. lib, function()
      assert.are.equal(names, names_of(lib))
    end)
  end

  it("has no other library than the expected ones", function()
    local env = tidepool.run([[
      local libs = {}
      for k, v in pairs(_G) do
        if type(v) == "table" and k ~= "_G" then libs[#libs + 1] = k end
      end
      table.sort(libs)
      return table.concat(libs, " ")
    ]])
    assert.are.equal("coroutine json math os string table tools utf8", env.result)
  end)

  it("matches sandbox/allowlist.h's KEEP, WRAP and OURS entries", function()
    local header = allowlist_header()
    local base = header._G
    for _, lib in ipairs{ "coroutine", "math", "os", "string", "table", "utf8", "_G" } do
      base[#base + 1] = lib
    end
    for lib, names in pairs(header) do
      table.sort(names)
      assert.are.equal(table.concat(names, " "), expected[lib], lib)
    end
  end)

  it("gives every allowed function a function value, and _G is the global table", function()
    local env = tidepool.run([[
      local bad = {}
      for _, lib in ipairs{ "string", "table", "math", "utf8", "coroutine", "os", "json" } do
        for k, v in pairs(_G[lib]) do
          local t = type(v)
          if t ~= "function" and not (lib == "math" and (k == "pi" or k == "huge"
              or k == "maxinteger" or k == "mininteger"))
              and not (lib == "utf8" and k == "charpattern")
              and not (lib == "json" and k == "null") then
            bad[#bad + 1] = lib .. "." .. k .. ":" .. t
          end
        end
      end
      return { bad = table.concat(bad, ","), g = _G == _G._G, v = _VERSION }
    ]])
    assert.are.same({ bad = "", g = true, v = "Lua 5.4" }, env.result)
  end)
end)
