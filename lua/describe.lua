-- describe.lua: what the model reads about the sandbox and its tools. Pure Lua, no I/O:
-- the host hands in the tools as plain tables and gets text or tables back.
--
-- A tool here is {name = "fs.read", description = "...", input = <schema>, output =
-- <schema or nil>}, schemas being JSON Schema decoded into Lua tables (arrays are plain
-- sequences). Every output is deterministic: keys are walked in sorted order.
--
--   describe.preamble()                 -> text: the sandbox, for the model
--   describe.lua_api(tools)             -> text: LuaCATS annotations of the tools
--   describe.run_lua_tool(tools, opts)  -> {name, description, inputSchema} of run_lua
--   describe.search(tools, query)       -> {{name, description, score}...} best first,
--                                          at most 50
local M = {}

local concat, sort = table.concat, table.sort

-- ---- small helpers -------------------------------------------------------------------

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    return a < b
  end)
  return keys
end

local function is_sequence(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  for i = 1, n do if t[i] == nil then return false end end
  return true
end

-- A value as JSON text, keys sorted; for defaults, enums and consts in the prose.
local function literal(v)
  local tv = type(v)
  if tv == "string" then
    return '"' .. v:gsub('[%c"\\]', function(c)
      local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t",
                      ["\r"] = "\\r" }
      return named[c] or ("\\u%04x"):format(c:byte())
    end) .. '"'
  elseif tv == "number" then
    if math.type(v) == "float" and v == math.floor(v) and v > -2^53 and v < 2^53 then
      return ("%d"):format(v)
    end
    return tostring(v)
  elseif tv == "boolean" then
    return tostring(v)
  elseif tv == "table" then
    if next(v) == nil then return "{}" end
    local parts = {}
    if is_sequence(v) then
      for i = 1, #v do parts[i] = literal(v[i]) end
      return "[" .. concat(parts, ",") .. "]"
    end
    for _, k in ipairs(sorted_keys(v)) do
      parts[#parts + 1] = literal(tostring(k)) .. ":" .. literal(v[k])
    end
    return "{" .. concat(parts, ",") .. "}"
  end
  return "null"   -- nil, json.null (a light userdata) and anything else
end

local function one_line(s)
  return (tostring(s):gsub("%s*\n%s*", " "):gsub("^%s+", ""):gsub("%s+$", ""))
end

local function is_identifier(s)
  local keywords = { ["and"] = 1, ["break"] = 1, ["do"] = 1, ["else"] = 1, ["elseif"] = 1,
    ["end"] = 1, ["false"] = 1, ["for"] = 1, ["function"] = 1, ["goto"] = 1, ["if"] = 1,
    ["in"] = 1, ["local"] = 1, ["nil"] = 1, ["not"] = 1, ["or"] = 1, ["repeat"] = 1,
    ["return"] = 1, ["then"] = 1, ["true"] = 1, ["until"] = 1, ["while"] = 1 }
  return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil and not keywords[s]
end

-- ---- schemas to LuaCATS --------------------------------------------------------------

-- The constraints of a schema, in a fixed order, as short phrases.
local constraints
function constraints(s)
  local c = {}
  local function range(lo, hi, unit)
    if lo and hi then c[#c + 1] = ("%s%s..%s"):format(unit, literal(lo), literal(hi))
    elseif lo then c[#c + 1] = ("%s>= %s"):format(unit, literal(lo))
    elseif hi then c[#c + 1] = ("%s<= %s"):format(unit, literal(hi)) end
  end
  range(s.minimum, s.maximum, "")
  if s.exclusiveMinimum ~= nil and type(s.exclusiveMinimum) == "number" then
    c[#c + 1] = "> " .. literal(s.exclusiveMinimum)
  end
  if s.exclusiveMaximum ~= nil and type(s.exclusiveMaximum) == "number" then
    c[#c + 1] = "< " .. literal(s.exclusiveMaximum)
  end
  if s.multipleOf ~= nil then c[#c + 1] = "multiple of " .. literal(s.multipleOf) end
  range(s.minLength, s.maxLength, "length ")
  range(s.minItems, s.maxItems, "items ")
  if s.uniqueItems == true then c[#c + 1] = "unique items" end
  range(s.minProperties, s.maxProperties, "keys ")
  if type(s.pattern) == "string" then c[#c + 1] = "pattern " .. s.pattern end
  if type(s.format) == "string" then c[#c + 1] = "format " .. s.format end
  if s.enum ~= nil and type(s.enum) == "table" then
    local vals = {}
    for i, v in ipairs(s.enum) do vals[i] = literal(v) end
    c[#c + 1] = "one of " .. concat(vals, ", ")
  end
  if s.const ~= nil then c[#c + 1] = "always " .. literal(s.const) end
  if s.default ~= nil then c[#c + 1] = "default " .. literal(s.default) end
  -- Constraints of scalar array items, which have no line of their own.
  local items = s.items
  if type(items) == "table" and items.properties == nil and not is_sequence(items) then
    local ic = constraints(items)
    if #ic > 0 then c[#c + 1] = "each " .. concat(ic, ", ") end
  end
  return c
end

-- The prose of a field or parameter: its description, then its constraints.
local function prose(s)
  local text = type(s.description) == "string" and one_line(s.description) or ""
  local c = constraints(s)
  if #c > 0 then
    local paren = "(" .. concat(c, "; ") .. ")"
    text = text == "" and paren or text .. " " .. paren
  end
  return text
end

-- Resolves a local "$ref" (#/$defs/X, #/definitions/X) against the tool's root schema;
-- returns the schema and its name, or nil.
local function resolve_ref(ctx, ref)
  if type(ref) ~= "string" then return nil end
  local node = ctx.root
  local name
  for part in ref:gsub("^#/?", ""):gmatch("[^/]+") do
    part = part:gsub("~1", "/"):gsub("~0", "~")
    if type(node) ~= "table" then return nil end
    node = node[part] or node[tonumber(part) and tonumber(part) + 1 or part]
    name = part
  end
  if type(node) ~= "table" or node == ctx.root then return nil end
  return node, name
end

local emit_class

-- The LuaCATS type of schema s; name is the class to use when s is an object with
-- properties (emitted into ctx.out after the current one).
local function lua_type(ctx, s, name)
  if type(s) ~= "table" then return "any" end
  if s["$ref"] ~= nil then
    local target, ref_name = resolve_ref(ctx, s["$ref"])
    if target == nil then return "any" end
    return lua_type(ctx, target, ctx.prefix .. "." .. ref_name)
  end
  if s.enum ~= nil and type(s.enum) == "table" and #s.enum > 0 then
    local vals = {}
    for i, v in ipairs(s.enum) do vals[i] = v == nil and "nil" or literal(v) end
    return concat(vals, "|")
  end
  if s.const ~= nil then return literal(s.const) end
  local alts = s.anyOf or s.oneOf
  if type(alts) == "table" and #alts > 0 then
    local seen, parts = {}, {}
    for i, a in ipairs(alts) do
      local t = lua_type(ctx, a, name .. "." .. i)
      if not seen[t] then seen[t] = true; parts[#parts + 1] = t end
    end
    return concat(parts, "|")
  end
  local t = s.type
  if type(t) == "table" then
    local parts = {}
    for i, one in ipairs(t) do
      local copy = {}
      for k, v in pairs(s) do copy[k] = v end
      copy.type = one
      parts[i] = lua_type(ctx, copy, name)
    end
    return concat(parts, "|")
  end
  if t == "string" or t == "integer" or t == "number" or t == "boolean" then return t end
  if t == "null" then return "nil" end
  if t == "array" or (t == nil and s.items ~= nil) then
    local items = s.items
    if type(items) ~= "table" or is_sequence(items) and #items > 0 then return "any[]" end
    local it = lua_type(ctx, items, name)
    if it:find("|", 1, true) then it = "(" .. it .. ")" end
    return it .. "[]"
  end
  if t == "object" or (t == nil and s.properties ~= nil) then
    if type(s.properties) == "table" and next(s.properties) ~= nil then
      emit_class(ctx, s, name)
      return name
    end
    if type(s.additionalProperties) == "table" then
      return "table<string, " .. lua_type(ctx, s.additionalProperties, name) .. ">"
    end
    return "table"
  end
  return "any"
end

-- Writes ---@class name and its ---@field lines into ctx.out, then the classes of its
-- nested objects. A class is written once per tool.
function emit_class(ctx, s, name)
  if ctx.emitted[name] then return end
  ctx.emitted[name] = true
  local required = {}
  if type(s.required) == "table" then
    for _, r in ipairs(s.required) do required[r] = true end
  end
  local lines = { "---@class " .. name }
  local slot = #ctx.out + 1
  ctx.out[slot] = false       -- this class's place; nested classes go after it
  for _, key in ipairs(sorted_keys(s.properties)) do
    local ps = s.properties[key]
    local ks = tostring(key)
    local field = is_identifier(ks) and ks or "[" .. literal(ks) .. "]"
    local ty = lua_type(ctx, ps, name .. "." .. ks)
    local text = type(ps) == "table" and prose(ps) or ""
    local line = ("---@field %s%s %s"):format(field, required[key] and "" or "?", ty)
    if text ~= "" then line = line .. " " .. text end
    lines[#lines + 1] = line
  end
  if s.additionalProperties ~= nil and s.additionalProperties ~= false then
    local ap = s.additionalProperties
    local ty = type(ap) == "table" and lua_type(ctx, ap, name .. ".*") or "any"
    lines[#lines + 1] = ("---@field [string] %s"):format(ty)
  end
  ctx.out[slot] = concat(lines, "\n")
end

-- The annotation block of one tool.
local function tool_api(tool)
  local name = tostring(tool.name)
  local out = {}
  local function type_of(schema, suffix)
    if schema == nil then return nil end
    local ctx = { root = schema, prefix = name, out = {}, emitted = {} }
    local ty = lua_type(ctx, schema, name .. "." .. suffix)
    for _, block in ipairs(ctx.out) do out[#out + 1] = block end
    return ty, schema
  end
  local in_type, in_schema = type_of(tool.input, "Args")
  local out_type, out_schema = type_of(tool.output, "Result")
  local fn = {}
  if type(tool.description) == "string" and tool.description ~= "" then
    for line in (tool.description .. "\n"):gmatch("(.-)\r?\n") do
      fn[#fn + 1] = line == "" and "---" or "---" .. line
    end
  end
  local in_prose = in_schema and in_type ~= name .. ".Args" and prose(in_schema) or ""
  fn[#fn + 1] = "---@param args " .. (in_type or "table") ..
    (in_prose ~= "" and " " .. in_prose or "")
  local out_prose = out_schema and out_type ~= name .. ".Result" and prose(out_schema) or ""
  fn[#fn + 1] = "---@return " .. (out_type or "any") ..
    (out_prose ~= "" and " # " .. out_prose or "")
  local path = {}
  for part in name:gmatch("[^.]+") do
    path[#path + 1] = is_identifier(part) and "." .. part or "[" .. literal(part) .. "]"
  end
  fn[#fn + 1] = "function tools" .. concat(path) .. "(args) end"
  out[#out + 1] = concat(fn, "\n")
  return concat(out, "\n\n")
end

local function by_name(tools)
  local list = {}
  for i, t in ipairs(tools) do list[i] = t end
  sort(list, function(a, b) return tostring(a.name) < tostring(b.name) end)
  return list
end

-- LuaCATS annotations for the tools, sorted by name, one block per tool: the classes of
-- its arguments and result, then its function.
function M.lua_api(tools)
  local blocks = {}
  for _, t in ipairs(by_name(tools)) do blocks[#blocks + 1] = tool_api(t) end
  return concat(blocks, "\n\n") .. (#blocks > 0 and "\n" or "")
end

-- ---- the preamble ------------------------------------------------------------------

local PREAMBLE = [[
Write one Lua 5.4 script per call. It runs in a sandbox and calls tools directly, so
intermediate data stays in the script and only what you return comes back.

- Available: the base library (no load of bytecode, no dofile/loadfile/require),
  string, table, math, utf8, coroutine, os.time, os.clock, os.date, and
  json.encode(v), json.decode(s), json.null (JSON null), json.array(t) (an array, even
  when empty). Not available: io, require, debug, os.execute and the rest of os.
- Call a tool with a table of arguments: local r = tools.fs.read{path = "a.txt"}.
  It returns the result table or raises an error object with err.code (for example
  tool.invalid_input, tool.failed, tool.timeout) and err.message; catch it with
  local ok, err = pcall(tools.fs.read, {path = "a.txt"}).
- parallel(f1, f2, ...) runs the functions at the same time (their tool calls overlap)
  and returns the first value of each, in order; if any fails, it raises the first
  error after all have finished.
- print(...) goes to the logs, not the result. The script's return value is the result,
  sent back as JSON: return a table, a string, a number or a boolean.
- Limits apply to memory, time, output size and the number of tool calls; a limit
  stops the script with an error code such as limit.time that pcall cannot catch.
- Inside the script, tools.list() names the tools, tools.describe(name) documents one
  and tools.search(query) finds them.]]

function M.preamble()
  return PREAMBLE .. "\n"
end

-- ---- the run_lua tool --------------------------------------------------------------

-- The tool definition of run_lua for an MCP, OpenAI or Anthropic tool list: the preamble
-- and the tools' API in its description. opts.session adds the session argument.
function M.run_lua_tool(tools, opts)
  opts = opts or {}
  local api = M.lua_api(tools)
  local description = M.preamble()
  if api ~= "" then
    description = description .. "\nThe tools (LuaCATS annotations):\n\n" .. api
  end
  local properties = {
    code = { type = "string",
             description = "The Lua 5.4 script to run; its return value is the result." },
  }
  if opts.session then
    properties.session = { type = "string",
      description = "Optional session id: runs with the same id share their global " ..
        "variables, so a script can build on the previous one." }
  end
  return {
    name = "run_lua",
    description = description,
    inputSchema = { type = "object", properties = properties, required = { "code" } },
  }
end

-- ---- search ------------------------------------------------------------------------

local NAME_WEIGHT = 3

-- How often the plain (lowercased) word occurs in s.
local function count(s, word)
  local n, at = 0, 1
  while true do
    local i, j = s:find(word, at, true)
    if not i then return n end
    n = n + 1
    at = j + 1
  end
end

-- What a search reads and returns is capped, since a script can search in a loop: the
-- host runs this under the run's verdict, and these caps keep one search small.
local MAX_WORDS, MAX_RESULTS, MAX_DESCRIPTION = 16, 50, 1000

-- s cut to at most n bytes at a character boundary, with "..." when cut.
local function cut(s, n)
  if #s <= n then return s end
  local at = n
  while at > 0 and (s:byte(at + 1) or 0) >= 0x80 and (s:byte(at + 1) or 0) < 0xC0 do
    at = at - 1
  end
  return s:sub(1, at) .. "..."
end

-- The tools ranked by the query's words (the first 16 distinct ones): each occurrence in
-- the name counts NAME_WEIGHT, each in the description 1. Tools that match nothing are
-- left out, unless the query has no words, which lists every tool. Ties are broken by
-- name. At most 50 tools, descriptions cut at 1000 bytes.
function M.search(tools, query)
  local words, seen = {}, {}
  for w in tostring(query or ""):lower():gmatch("[%w_]+") do
    if not seen[w] then
      seen[w] = true
      words[#words + 1] = w
      if #words == MAX_WORDS then break end
    end
  end
  local hits = {}
  for _, t in ipairs(by_name(tools)) do
    local name = tostring(t.name):lower()
    local desc = type(t.description) == "string" and t.description:lower() or ""
    local score = 0
    for _, w in ipairs(words) do
      score = score + NAME_WEIGHT * count(name, w) + count(desc, w)
    end
    if score > 0 or #words == 0 then
      hits[#hits + 1] = { name = t.name, score = score,
                          description = cut(type(t.description) == "string" and
                                            t.description or "", MAX_DESCRIPTION) }
    end
  end
  sort(hits, function(a, b)
    if a.score ~= b.score then return a.score > b.score end
    return tostring(a.name) < tostring(b.name)
  end)
  for i = #hits, MAX_RESULTS + 1, -1 do hits[i] = nil end
  return hits
end

return M
