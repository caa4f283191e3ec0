-- fixture.lua: reads a JSON file of tools ({name, description, inputSchema,
-- outputSchema}) into describe.lua's tools, keeping each object's key order (the
-- schema's field order) in tool.order, the way the engine hands in JSON schemas.
local M = {}

-- A JSON decoder that records the key order of every object: order[obj] = {keys...}.
local function decode(text, order, null)
  local pos = 1
  local value
  local function ws() pos = text:find("[^ \t\r\n]", pos) or #text + 1 end
  local function err(what) error(("fixture JSON: %s at byte %d"):format(what, pos)) end
  local escapes = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
  local function str()
    local out = {}
    pos = pos + 1
    while true do
      local c = text:sub(pos, pos)
      if c == "" then err("unterminated string") end
      if c == '"' then pos = pos + 1 break end
      if c == "\\" then
        local e = text:sub(pos + 1, pos + 1)
        if e == "u" then
          out[#out + 1] = utf8.char(tonumber(text:sub(pos + 2, pos + 5), 16))
          pos = pos + 6
        else
          out[#out + 1] = escapes[e] or e
          pos = pos + 2
        end
      else
        out[#out + 1] = c
        pos = pos + 1
      end
    end
    return table.concat(out)
  end
  function value()
    ws()
    local c = text:sub(pos, pos)
    if c == "{" then
      local obj, keys = {}, {}
      pos = pos + 1
      ws()
      if text:sub(pos, pos) == "}" then pos = pos + 1 order[obj] = keys return obj end
      while true do
        ws()
        local k = str()
        ws()
        if text:sub(pos, pos) ~= ":" then err("':' expected") end
        pos = pos + 1
        obj[k] = value()
        keys[#keys + 1] = k
        ws()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "}" then break end
        if d ~= "," then err("',' or '}' expected") end
      end
      order[obj] = keys
      return obj
    elseif c == "[" then
      local arr = {}
      pos = pos + 1
      ws()
      if text:sub(pos, pos) == "]" then pos = pos + 1 return arr end
      while true do
        arr[#arr + 1] = value()  -- a null in an array (without a null value) is dropped
        ws()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "]" then break end
        if d ~= "," then err("',' or ']' expected") end
      end
      return arr
    elseif c == '"' then return str()
    elseif text:sub(pos, pos + 3) == "true" then pos = pos + 4 return true
    elseif text:sub(pos, pos + 4) == "false" then pos = pos + 5 return false
    elseif text:sub(pos, pos + 3) == "null" then pos = pos + 4 return null
    end
    local n = text:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if not n then err("value expected") end
    pos = pos + #n
    return math.tointeger(tonumber(n)) or tonumber(n)
  end
  return value()
end

-- The value of JSON text, and the key order of its objects; null becomes the value
-- null (nil when not given).
function M.decode(text, null)
  local order = {}
  return decode(text, order, null), order
end

-- The tools of a fixture file, for describe.lua.
function M.load(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  local order = {}
  local list = decode(text, order)
  local tools = {}
  for i, t in ipairs(list) do
    tools[i] = { name = t.name, description = t.description, input = t.inputSchema,
                 output = t.outputSchema, order = order }
  end
  return tools
end

return M
