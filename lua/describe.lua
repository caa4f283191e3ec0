-- describe.lua: what the model reads about the sandbox and its tools. Pure Lua, no I/O:
-- the host hands in the tools as plain tables and gets text or tables back.
--
-- A tool here is {name = "fs.read", description = "...", input = <schema>, output =
-- <schema or nil>, order = <table or nil>, kind = <provider or nil>: "upstream" for an
-- MCP server's tool, whose result without an output schema is its text, unwrapped},
-- schemas being JSON Schema decoded into Lua
-- tables (arrays are plain sequences). order maps a schema's properties table to its keys
-- in the schema's order, when the schema came as JSON text; without it the fields that
-- are not required are sorted. Every output is deterministic.
--
--   describe.preamble()                 -> text: the sandbox, for the model
--   describe.lua_api(tools)             -> text: each tool's call, fields and result
--   describe.compact_api(tools)         -> text: one line per tool
--   describe.describe(tools, mode)      -> text: preamble and tools ("full", "compact")
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
local function literal(v, depth)
  depth = depth or 0
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
    if depth >= 32 then return "..." end
    local parts = {}
    if is_sequence(v) then
      for i = 1, #v do parts[i] = literal(v[i], depth + 1) end
      return "[" .. concat(parts, ",") .. "]"
    end
    for _, k in ipairs(sorted_keys(v)) do
      parts[#parts + 1] = literal(tostring(k)) .. ":" .. literal(v[k], depth + 1)
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

-- ---- schemas to signatures -----------------------------------------------------------
--
-- A tool reads as a Lua call with its argument table spelled out, one field a line, in
-- the schema's order with the required fields first ("?" marks the optional ones):
--
--   -- Create an issue.
--   tools.github.create_issue{
--     owner: string
--     title: string 1..256 chars -- The issue's title.
--     labels?: string[] <=10 items, unique
--   } -> {number: integer, html_url: string}
--
-- Every rule the validator enforces is written once, in its shortest form: a range after
-- the type (1..50, >=1), a format in the type (string(email)), an enum or a const as the
-- type itself, a default as "= 30". Rules about several fields (not, if/then,
-- dependentRequired, oneOf of required sets...) follow the fields as "-- " lines. A
-- nullable field is "T|json.null": nil means "leave it out".

local fields_of, type_of, with_notes

-- The keys of object schema s in the order to show: the required ones first, then the
-- rest; each group in the schema's order when ctx.order knows it (JSON schemas), else
-- the required ones as listed and the rest sorted.
local function field_order(ctx, s)
  local props = s.properties
  local required, req_list = {}, {}
  if type(s.required) == "table" then
    for _, r in ipairs(s.required) do
      if props[r] ~= nil and not required[r] then
        required[r] = true
        req_list[#req_list + 1] = r
      end
    end
  end
  local keys = ctx.order and ctx.order[props]
  local out = {}
  if keys then
    for _, k in ipairs(keys) do if required[k] then out[#out + 1] = k end end
    for _, k in ipairs(keys) do if not required[k] then out[#out + 1] = k end end
    return out, required
  end
  for _, k in ipairs(req_list) do out[#out + 1] = k end
  for _, k in ipairs(sorted_keys(props)) do if not required[k] then out[#out + 1] = k end end
  return out, required
end

-- The first subschema of root (depth first) for which match(subschema) is true, or nil.
local function find_schema(root, match)
  local seen = {}
  local function walk(s, depth)
    if type(s) ~= "table" or seen[s] or depth > 64 then return nil end
    seen[s] = true
    if match(s) then return s end
    for k, v in pairs(s) do
      if k ~= "enum" and k ~= "const" then
        local hit = walk(v, depth + 1)
        if hit then return hit end
      end
    end
  end
  return walk(root, 0)
end

-- Resolves a "$ref" within the tool's own schema: "#", a JSON pointer ("#/$defs/X",
-- "#/definitions/X", %-escapes and ~0 ~1 decoded), an anchor ("#X"), or a subschema's
-- "$id" ("node", "http://x/tree#/items"), the pointer then read from that subschema.
-- Anything else (another document) is nil: the type is then shown as any.
local resolve_uncached

local function resolve_ref(ctx, ref)
  if type(ref) ~= "string" then return nil end
  -- remembered per schema: an anchor or an $id is found by a walk of the whole schema
  local cache = ctx.ref_cache
  if cache == nil then cache = {}; ctx.ref_cache = cache end
  local hit = cache[ref]
  if hit == nil then
    hit = resolve_uncached(ctx, ref) or false
    cache[ref] = hit
  end
  return hit or nil
end

function resolve_uncached(ctx, ref)
  local uri, frag = ref:match("^([^#]*)#?(.*)$")
  local node = ctx.root
  if uri ~= "" then
    node = find_schema(ctx.root, function(s)
      local id = s["$id"] or s.id
      return type(id) == "string" and (id == uri or id:sub(-#uri - 1) == "/" .. uri or
                                       id:gsub("#$", "") == uri)
    end)
  end
  if frag ~= "" and frag:sub(1, 1) ~= "/" then  -- an anchor
    node = find_schema(node, function(s)
      return s["$anchor"] == frag or s["$dynamicAnchor"] == frag
    end)
    return type(node) == "table" and node or nil
  end
  frag = frag:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
  for part in frag:gmatch("[^/]+") do
    part = part:gsub("~1", "/"):gsub("~0", "~")
    if type(node) ~= "table" then return nil end
    local i = math.tointeger(tonumber(part))
    local v = node[part]
    if v == nil and i then v = node[i + 1] end
    node = v
  end
  if type(node) ~= "table" then return nil end
  return node
end

-- The schema s stands for: its "$ref"'s target, followed through references to
-- references; {} (any) when a reference does not resolve or the chain loops.
local function deref(ctx, s)
  local hops = 0
  while type(s) == "table" and s["$ref"] ~= nil do
    if hops == 16 then return {} end
    local t = resolve_ref(ctx, s["$ref"])
    if t == nil then return {} end
    s, hops = t, hops + 1
  end
  return s
end

-- ---- definitions written by name -----------------------------------------------------
--
-- A schema that contains itself (a tree of nodes, a JSON value, a filter expression)
-- cannot be written out: it is written once by name after the tool's call,
-- "node = {name: string, children?: node[]}", and "node" wherever it occurs. So is an
-- object definition that the schema references twice or more ("start: time, stop: time").

-- Keys whose values are data, not schemas.
local DATA_KEYS = { enum = true, const = true, default = true, examples = true,
                    required = true, dependentRequired = true }

-- Finds the schemas of root that contain themselves: a depth-first walk that follows
-- "$ref"s; a reference (or a plain table) back to a schema on the walk's path closes a
-- cycle, and every cycle has one such edge, so naming their targets breaks every cycle.
-- Returns {[schema] = the name it suggests}.
local function find_recursive(ctx, root)
  local rec, state = {}, {}  -- state: 1 on the path, 2 done
  local function visit(s, depth)
    state[s] = 1
    for k, v in pairs(s) do
      local target, hint = nil, nil
      if k == "$ref" and type(v) == "string" then
        target, hint = deref(ctx, s), v
        if target == s or next(target) == nil then target = nil end
      elseif type(v) == "table" and not DATA_KEYS[k] then
        target, hint = v, nil
      end
      if target then
        if state[target] == 1 then
          if rec[target] == nil then rec[target] = hint or false end
        elseif state[target] == nil and depth < 200 then
          visit(target, depth + 1)
        end
      end
    end
    state[s] = 2
  end
  if type(root) == "table" then visit(root, 0) end
  return rec
end

local TYPE_WORDS = { string = true, integer = true, number = true, boolean = true,
  table = true, any = true, never = true, json = true, tools = true, args = true,
  result = true }

-- The name schema target is written by in ctx's tool (one name per schema, unique in
-- the tool), registered to be defined after the call. hint is the "$ref" that names it.
local function def_name(ctx, target, hint)
  local names = ctx.names
  local name = names.of[target]
  if name then return name end
  if target == ctx.top then
    name = ctx.kind == "output" and "result" or "args"
  else
    local last = type(hint) == "string" and hint:gsub("%%(%x%x)", function(h)
      return string.char(tonumber(h, 16))
    end):match("([^/#]+)/*$")
    last = last and last:gsub("~1", "/"):gsub("~0", "~")
    if not last and type(target.title) == "string" then last = target.title end
    name = last and last:gsub("[^%w_]+", "_"):gsub("^_+", ""):gsub("_+$", "") or ""
    if name == "" then name = "def" end
    if name:match("^%d") then name = "t" .. name end
    if TYPE_WORDS[name] ~= nil or not is_identifier(name) then name = name .. "_t" end
  end
  local base, n = name, 1
  while names.used[name] do n = n + 1; name = base .. n end
  names.of[target], names.used[name] = name, target
  names.list[#names.list + 1] = { name = name, schema = target, ctx = ctx }
  return name
end

local function num(v) return literal(v) end

-- A range as "lo..hi", ">=lo" or "<=hi", after a prefix ("" for a value, "#" for a
-- length, as Lua's # operator), or nil.
local function range(lo, hi, pre)
  if lo and hi then
    if lo == hi then return pre .. num(lo) end
    return pre .. num(lo) .. ".." .. num(hi)
  end
  if lo then return pre .. ">=" .. num(lo) end
  if hi then return pre .. "<=" .. num(hi) end
end

-- The constraints of s that its type does not show, in their shortest form.
local function notes(ctx, s)
  local c = {}
  local function add(x) if x then c[#c + 1] = x end end
  local xmin, xmax = s.exclusiveMinimum, s.exclusiveMaximum
  if type(xmin) == "number" then add(">" .. num(xmin))
  elseif s.minimum and not s.maximum then add(">=" .. num(s.minimum)) end
  if s.minimum and s.maximum and type(xmin) ~= "number" and type(xmax) ~= "number" then
    add(range(s.minimum, s.maximum, ""))
  else
    if s.minimum and s.maximum then add(">=" .. num(s.minimum)) end
    if type(xmax) == "number" then add("<" .. num(xmax))
    elseif s.maximum then add("<=" .. num(s.maximum)) end
  end
  if s.multipleOf ~= nil then add("multiple of " .. num(s.multipleOf)) end
  add(range(s.minLength, s.maxLength, "#"))
  if type(s.pattern) == "string" then add("/" .. s.pattern .. "/") end
  add(range(s.minItems, s.maxItems, "#"))
  if s.uniqueItems == true then add("unique") end
  if type(s.contains) == "table" then
    local n = range(s.minContains, s.maxContains, "")
    add("contains " .. (n and n .. " " or "") .. type_of(ctx, s.contains, ""))
  end
  add(range(s.minProperties, s.maxProperties, "#keys"))
  if type(s.propertyNames) == "table" then
    local pn = deref(ctx, s.propertyNames)
    local pc = {}
    if type(pn.pattern) == "string" then pc[#pc + 1] = "/" .. pn.pattern .. "/" end
    local r = range(pn.minLength, pn.maxLength, "#")
    if r then pc[#pc + 1] = r end
    if type(pn.enum) == "table" then
      local vals = {}
      for i, v in ipairs(pn.enum) do vals[i] = literal(v) end
      pc[#pc + 1] = concat(vals, "|")
    end
    if #pc > 0 then add("keys " .. concat(pc, " ")) end
  end
  -- an optional boolean that defaults to false reads as false when left out anyway
  if s.default ~= nil and not (s.default == false and s.type == "boolean") then
    c.default = "= " .. literal(s.default)
  end
  return c
end

-- The notes as text: the constraints, comma-separated, then the default ("= 30").
local function notes_text(c)
  local t = concat(c, ", ")
  if c.default then t = t == "" and c.default or t .. " " .. c.default end
  return t
end

local SCALAR = { string = true, integer = true, number = true, boolean = true }

local function value_literal(v)
  if v == nil or (type(v) ~= "table" and type(v) ~= "string" and type(v) ~= "number"
                  and type(v) ~= "boolean") then
    return "json.null"
  end
  return literal(v)
end

-- Joins alternatives, each once, json.null last.
local function union(parts)
  local seen, out, null = {}, {}, false
  for _, p in ipairs(parts) do
    if p == "json.null" then null = true
    elseif not seen[p] then seen[p] = true; out[#out + 1] = p end
  end
  if null then out[#out + 1] = "json.null" end
  return concat(out, "|")
end

-- The names of a required-set schema ({required = {...}} alone), or nil.
local function required_set(s)
  if type(s) ~= "table" or type(s.required) ~= "table" then return nil end
  for k in pairs(s) do if k ~= "required" then return nil end end
  return concat(s.required, " and ")
end

-- A short phrase for a condition schema of if/then ({properties = {x = {const = v}}}).
local function condition(ctx, s)
  s = deref(ctx, s)
  if type(s) ~= "table" or type(s.properties) ~= "table" then return nil end
  local parts = {}
  for _, k in ipairs(sorted_keys(s.properties)) do
    local p = s.properties[k]
    if type(p) ~= "table" then return nil end
    if p.const ~= nil then parts[#parts + 1] = k .. " = " .. value_literal(p.const)
    elseif type(p.enum) == "table" then
      local vals = {}
      for i, v in ipairs(p.enum) do vals[i] = value_literal(v) end
      parts[#parts + 1] = k .. " in " .. concat(vals, "|")
    else return nil end
  end
  if #parts == 0 then return nil end
  return concat(parts, " and ")
end

-- What a then/else schema asks, as a phrase.
local function consequence(ctx, s)
  s = deref(ctx, s)
  if type(s) ~= "table" then return nil end
  local parts = {}
  if type(s.required) == "table" and #s.required > 0 then
    parts[#parts + 1] = concat(s.required, ", ") .. " required"
  end
  if type(s.properties) == "table" then
    for _, k in ipairs(sorted_keys(s.properties)) do
      local p = deref(ctx, s.properties[k])
      if p == false or type(p) == "table" and p["not"] ~= nil and next(p["not"]) == nil then
        parts[#parts + 1] = k .. " not allowed"
      elseif type(p) == "table" then
        local t = type_of(ctx, p, "")
        local n = notes_text(notes(ctx, p))
        parts[#parts + 1] = k .. ": " .. t .. (n ~= "" and " " .. n or "")
      end
    end
  end
  if #parts == 0 then return nil end
  return concat(parts, "; ")
end

-- The rules of object schema s that involve several fields, one phrase each.
local function object_rules(ctx, s)
  local r = {}
  local n = s["not"]
  if type(n) == "table" then
    local set = required_set(n)
    if set and #n.required == 2 then r[#r + 1] = "not both " .. set
    elseif set then r[#r + 1] = "not all of " .. concat(n.required, ", ")
    elseif type(n.anyOf) == "table" then
      local names = {}
      for _, alt in ipairs(n.anyOf) do
        local one = required_set(alt)
        if not one then names = nil break end
        names[#names + 1] = one
      end
      if names then r[#r + 1] = "none of " .. concat(names, ", ") end
    end
    if #r == 0 then r[#r + 1] = "must not match " .. type_of(ctx, n, "") end
  end
  for _, key in ipairs({ "oneOf", "anyOf" }) do
    local alts = s[key]
    if type(alts) == "table" and #alts > 0 and s.properties then
      local names = {}
      for _, alt in ipairs(alts) do
        local one = required_set(alt)
        if not one then names = nil break end
        names[#names + 1] = one
      end
      if names then
        r[#r + 1] = (key == "oneOf" and "exactly one of " or "at least one of ")
          .. concat(names, " | ")
      end
    end
  end
  if type(s.dependentRequired) == "table" then
    for _, k in ipairs(sorted_keys(s.dependentRequired)) do
      r[#r + 1] = k .. " needs " .. concat(s.dependentRequired[k], ", ")
    end
  end
  if s["if"] ~= nil and (s["then"] ~= nil or s["else"] ~= nil) then
    local cond = condition(ctx, s["if"])
    local th = s["then"] and consequence(ctx, s["then"])
    local el = s["else"] and consequence(ctx, s["else"])
    if cond and (th or el) then
      if th then r[#r + 1] = "if " .. cond .. ": " .. th end
      if el then r[#r + 1] = "unless " .. cond .. ": " .. el end
    else
      r[#r + 1] = "conditional rules apply (if/then): see the tool's description"
    end
  end
  return r
end

-- The type of s with its notes, for a place that has no line of its own (an item, an
-- alternative, a tuple member, a map value): "(string #>=1)", or bare when the
-- caller's punctuation delimits it.
function with_notes(ctx, s, ind, bare)
  local t = type_of(ctx, s, ind)
  s = deref(ctx, s)
  if type(s) ~= "table" or t:find("\n", 1, true) or ctx.names.of[s] == t then return t end
  local n = notes_text(notes(ctx, s))
  if n == "" then return t end
  return bare and t .. " " .. n or "(" .. t .. " " .. n .. ")"
end

-- The type of schema s as text; objects with fields become indented blocks (ind is the
-- indentation of the line the type starts on).
local type_of_raw

local MAX_DEPTH = 200

-- type_of, remembered per schema and indentation: a schema reached many times (allOf
-- of allOf of the same $ref...) is written once, so the work stays linear.
function type_of(ctx, s, ind)
  if type(s) ~= "table" then return type_of_raw(ctx, s, ind) end
  ctx.memo = ctx.memo or {}
  local m = ctx.memo[s]
  if m == nil then m = {}; ctx.memo[s] = m end
  local t = m[ind]
  if t == nil then
    -- the safety net under find_recursive: a schema met again inside itself is named,
    -- and a nesting past MAX_DEPTH reads any, so no schema runs the stack out
    ctx.active = ctx.active or {}
    if ctx.active[s] then return def_name(ctx, s, s.title) end
    ctx.depth = (ctx.depth or 0) + 1
    if ctx.depth > MAX_DEPTH then ctx.depth = ctx.depth - 1 return "any" end
    ctx.active[s] = true
    t = type_of_raw(ctx, s, ind)
    ctx.active[s] = nil
    ctx.depth = ctx.depth - 1
    m[ind] = t
  end
  return t
end

function type_of_raw(ctx, s, ind, expand)
  local ref = type(s) == "table" and s["$ref"]
  if ref then
    local target = deref(ctx, s)
    if (ctx.refs[ref] or 0) >= 2 and type(target.properties) == "table" and
       next(target.properties) ~= nil then
      return def_name(ctx, target, ref)
    end
    return type_of(ctx, target, ind)  -- remembered by its target
  end
  if not expand and type(s) == "table" and ctx.rec[s] ~= nil then
    return def_name(ctx, s, ctx.rec[s])
  end
  if s == true or type(s) ~= "table" then return "any" end
  if s == false then return "never" end
  if type(s.enum) == "table" and #s.enum > 0 then
    local vals = {}
    for i, v in ipairs(s.enum) do vals[i] = value_literal(v) end
    return union(vals)
  end
  if s.const ~= nil then return value_literal(s.const) end
  local alts = s.anyOf or s.oneOf
  if type(alts) == "table" and #alts > 0 and s.properties == nil then
    local parts = {}
    for i, a in ipairs(alts) do parts[i] = with_notes(ctx, a, ind) end
    return union(parts)
  end
  if type(s.allOf) == "table" and #s.allOf > 0 and s.properties == nil then
    local merged = { type = s.type, properties = {}, required = {} }
    local order = {}
    for _, part in ipairs(s.allOf) do
      part = deref(ctx, part)
      if type(part) == "table" then
        merged.type = merged.type or part.type
        local keys = ctx.order and part.properties and ctx.order[part.properties]
        for _, k in ipairs(keys or (part.properties and sorted_keys(part.properties) or {})) do
          if merged.properties[k] == nil then order[#order + 1] = k end
          merged.properties[k] = part.properties[k]
        end
        for _, k in ipairs(type(part.required) == "table" and part.required or {}) do
          merged.required[#merged.required + 1] = k
        end
      end
    end
    if next(merged.properties) == nil then
      local parts, seen = {}, {}
      for _, a in ipairs(s.allOf) do
        local t = type_of(ctx, a, ind)
        if not seen[t] then seen[t] = true; parts[#parts + 1] = t end
      end
      return concat(parts, " & ")
    end
    if ctx.order then ctx.order[merged.properties] = order end
    return type_of(ctx, merged, ind)
  end
  local t = s.type
  if type(t) == "table" then
    local parts = {}
    for i, one in ipairs(t) do
      local copy = {}
      for k, v in pairs(s) do copy[k] = v end
      copy.type = one
      parts[i] = type_of(ctx, copy, ind)
    end
    return union(parts)
  end
  if SCALAR[t] then
    if t == "string" and type(s.format) == "string" then return "string(" .. s.format .. ")" end
    return t
  end
  if t == "null" then return "json.null" end
  if t == "array" or (t == nil and (s.items ~= nil or s.prefixItems ~= nil)) then
    local prefix = s.prefixItems
    if type(prefix) == "table" and #prefix > 0 then
      local parts = {}
      for i, p in ipairs(prefix) do parts[i] = with_notes(ctx, p, ind, true) end
      return "{" .. concat(parts, ", ") .. "}"
    end
    local items = s.items
    if type(items) ~= "table" or next(items) == nil then return "any[]" end
    local it = with_notes(ctx, items, ind)
    if it:find("[| ]") and not it:find("^[({]") and not it:find("\n", 1, true) then
      it = "(" .. it .. ")"
    end
    return it .. "[]"
  end
  if t == "object" or (t == nil and s.properties ~= nil) then
    if type(s.properties) == "table" and next(s.properties) ~= nil then
      return fields_of(ctx, s, ind)
    end
    local ap = s.additionalProperties
    if type(ap) == "table" and next(ap) ~= nil then
      return "{[string]: " .. with_notes(ctx, ap, ind, true) .. "}"
    end
    return "table"
  end
  return "any"
end

-- An object's fields: inline ({a: string, b?: integer 1..9}) when no field has a
-- description or a nested block and there are at most 4; else one field a line.
function fields_of(ctx, s, ind)
  local keys, required = field_order(ctx, s)
  local inner = ind .. " "  -- one space a level: o200k reads "\n " + " name" as one token less
  local lines, simple = {}, #keys <= 4
  for _, k in ipairs(keys) do
    local raw = s.properties[k]
    local ps = deref(ctx, raw)
    local ks = tostring(k)
    local name = is_identifier(ks) and ks or literal(ks)
    local t = type_of(ctx, raw, inner)
    local line = name .. (required[k] and "" or "?") .. ": " .. t
    if type(ps) == "table" then
      -- a definition written by name has its notes and description on its own line
      local named = ctx.names.of[ps] == t
      local n = named and "" or notes_text(notes(ctx, ps))
      if n ~= "" then line = line .. " " .. n end
      local desc = type(raw) == "table" and raw.description
      if desc == nil and not named then desc = ps.description end
      if type(desc) == "string" and desc:find("%S") then
        line = line .. " -- " .. one_line(desc)
        simple = false
      end
    end
    if line:find("\n", 1, true) then simple = false end
    lines[#lines + 1] = line
  end
  local ap = s.additionalProperties
  if type(ap) == "table" and next(ap) ~= nil then
    lines[#lines + 1] = "[string]: " .. with_notes(ctx, ap, inner, true)
    simple = false
  end
  local rules = object_rules(ctx, s)
  for _, r in ipairs(rules) do lines[#lines + 1] = "-- " .. r; simple = false end
  if simple then return "{" .. concat(lines, ", ") .. "}" end
  return "{\n" .. inner .. concat(lines, "\n" .. inner) .. "\n" .. ind .. "}"
end

-- How a tool is named in its block: its dotted name ("github.create_issue", called as
-- tools.github.create_issue{...}), or the whole call path when a part is not an
-- identifier (tools.a["odd-name"]).
local function call_path(name)
  local path, plain = { "tools" }, true
  for part in name:gmatch("[^.]+") do
    if not is_identifier(part) then plain = false end
    path[#path + 1] = is_identifier(part) and "." .. part or "[" .. literal(part) .. "]"
  end
  if plain then return name end
  return concat(path)
end

-- How often each "$ref" occurs in schema s: a definition used twice or more is written
-- once, by name, after the tool's call ("time = {...}").
local function count_refs(s, refs, depth)
  if type(s) ~= "table" or depth > 64 then return refs end
  for k, v in pairs(s) do
    if k == "$ref" and type(v) == "string" then refs[v] = (refs[v] or 0) + 1
    elseif type(v) == "table" then count_refs(v, refs, depth + 1) end
  end
  return refs
end

-- The lines "name = ..." of the definitions named while writing a tool, each once (a
-- definition may name others: they follow). The argument table or the result itself,
-- when it contains itself, is named args or result, and the call above defines it.
local function def_lines(names, out)
  local i = 1
  while names.list[i] do
    local d = names.list[i]
    if d.schema == d.ctx.top then
      out[#out + 1] = "-- " .. d.name .. ": the " .. (d.name == "args" and
        "argument table" or "result") .. " itself"
    else
      local line = d.name .. " = " .. type_of_raw(d.ctx, d.schema, "", true)
      local n = notes_text(notes(d.ctx, d.schema))
      if n ~= "" then line = line .. " " .. n end
      local desc = d.schema.description
      if type(desc) == "string" and desc:find("%S") then
        local first, rest = line:match("^([^\n]*)(.*)$")
        line = first .. " -- " .. one_line(desc) .. rest
      end
      out[#out + 1] = line
    end
    i = i + 1
  end
end

-- The context of writing one schema (kind "input" or "output") of a tool.
local function schema_ctx(tool, kind, names)
  local root = kind == "output" and tool.output or tool.input
  local ctx = { root = root, order = tool.order, kind = kind, names = names,
                refs = count_refs(root, {}, 0) }
  ctx.rec = find_recursive(ctx, root)
  ctx.top = deref(ctx, root)
  return ctx
end

-- The block of one tool: its description as comments, then its call.
local function tool_api(tool)
  local name = tostring(tool.name)
  local out = {}
  local desc = type(tool.description) == "string" and tool.description:gsub("%s+$", "") or ""
  local inline_desc = desc:find("%S") and not desc:find("\n") and desc:gsub("^%s+", "")
  if desc:find("%S") and not inline_desc then
    for line in (desc .. "\n"):gmatch("(.-)\r?\n") do
      out[#out + 1] = line == "" and "--" or "-- " .. line
    end
  end
  local names = { of = {}, used = {}, list = {} }
  local ctx = schema_ctx(tool, "input", names)
  local input = deref(ctx, tool.input)
  local args
  if type(input) == "table" and type(input.properties) == "table" and next(input.properties) then
    args = fields_of(ctx, input, "")
  elseif type(input) == "table" and type(input.additionalProperties) == "table" then
    args = "{[string]: " .. type_of(ctx, input.additionalProperties, "") .. "}"
  else
    args = "{}"
  end
  local sig = call_path(name) .. args
  if tool.output == nil and tool.kind == "upstream" then
    sig = sig .. " -> text"  -- what an MCP server's tool without outputSchema gives back
  elseif tool.output ~= nil then
    local octx = schema_ctx(tool, "output", names)
    local out_s = deref(octx, tool.output)
    sig = sig .. " -> " .. type_of_raw(octx, out_s, "", true)
    local n = type(out_s) == "table" and out_s.properties == nil and
              notes_text(notes(octx, out_s)) or ""
    if n ~= "" then sig = sig .. " " .. n end
  end
  if inline_desc then  -- after the first line of the call
    local first, rest = sig:match("^([^\n]*)(.*)$")
    sig = first .. " -- " .. inline_desc .. rest
  end
  out[#out + 1] = sig
  def_lines(names, out)
  return concat(out, "\n")
end

local function by_name(tools)
  local list = {}
  for i, t in ipairs(tools) do list[i] = t end
  sort(list, function(a, b) return tostring(a.name) < tostring(b.name) end)
  return list
end

-- What "-> text" means: an MCP server's tool without an outputSchema answers with text,
-- which the host unwraps (lua/upstream.lua) before the script sees it.
local TEXT_NOTE = "-- -> text: the tool's text, unwrapped: JSON text becomes a table, " ..
                  "other text a string"

local function text_result(t) return t.output == nil and t.kind == "upstream" end

-- The tools' API, sorted by name, one block per tool separated by a blank line, and what
-- "-> text" means when a tool has it.
function M.lua_api(tools)
  local blocks, text = {}, false
  for _, t in ipairs(by_name(tools)) do
    blocks[#blocks + 1] = tool_api(t)
    text = text or text_result(t)
  end
  if text then blocks[#blocks + 1] = TEXT_NOTE end
  return concat(blocks, "\n\n") .. (#blocks > 0 and "\n" or "")
end

-- The keys of a tool's result, when its output schema is an object with fields, or nil.
local function result_keys(t)
  local ctx = { root = t.output, order = t.order }
  local out = deref(ctx, t.output)
  if type(out) ~= "table" or type(out.properties) ~= "table" or next(out.properties) == nil then
    return nil
  end
  local keys = field_order(ctx, out)
  if #keys > 6 then keys = { keys[1], keys[2], keys[3], keys[4], keys[5], "..." } end
  for i, k in ipairs(keys) do keys[i] = tostring(k) end
  return "{" .. concat(keys, ", ") .. "}"
end

-- One line per tool: its call with the required fields (and "..." when it takes more)
-- and the keys of its result, for clients that cut long descriptions;
-- tools.describe(name) gives the rest.
function M.compact_api(tools)
  local lines, text = {}, false
  for _, t in ipairs(by_name(tools)) do
    local ctx = { root = t.input, order = t.order }
    local input = deref(ctx, t.input)
    local names, more = {}, false
    if type(input) == "table" and type(input.properties) == "table" then
      local keys, required = field_order(ctx, input)
      for _, k in ipairs(keys) do
        if required[k] then names[#names + 1] = tostring(k) else more = true end
      end
    end
    if more then names[#names + 1] = "..." end
    local line = call_path(tostring(t.name)) .. "{" .. concat(names, ", ") .. "}"
    local r = text_result(t) and "text" or result_keys(t)
    if r then line = line .. " -> " .. r end
    lines[#lines + 1] = line
    text = text or text_result(t)
  end
  if text then lines[#lines + 1] = TEXT_NOTE end
  return concat(lines, "\n") .. (#lines > 0 and "\n" or "")
end

-- A tool's namespace: its name without the last part ("github" of github.create_issue),
-- "" for a name without a dot.
local function namespace(name)
  return name:match("^(.*)%.[^.]*$") or ""
end

-- The tools by namespace, namespaces sorted: {{ns = "github", names = {...}}...}.
local function groups(tools)
  local list, of = {}, {}
  for _, t in ipairs(by_name(tools)) do
    local name = tostring(t.name)
    local ns = namespace(name)
    local g = of[ns]
    if not g then
      g = { ns = ns, names = {} }
      of[ns] = g
      list[#list + 1] = g
    end
    g.names[#g.names + 1] = ns == "" and name or name:sub(#ns + 2)
  end
  return list
end

local function ns_path(ns) return ns == "" and "tools" or call_path("tools." .. ns) end

-- One line per namespace with the names of its tools: "tools.github: create_issue, ...".
function M.grouped_api(tools)
  local lines = {}
  for _, g in ipairs(groups(tools)) do
    lines[#lines + 1] = ns_path(g.ns) .. ": " .. concat(g.names, ", ")
  end
  return concat(lines, "\n") .. (#lines > 0 and "\n" or "")
end

-- One line per namespace with its number of tools, at most max bytes in all (the
-- namespaces that do not fit are counted on a last line).
function M.counts_api(tools, max)
  local lines, used, list = {}, 0, groups(tools)
  for i, g in ipairs(list) do
    local line = ns_path(g.ns) .. ": " .. #g.names .. (#g.names == 1 and " tool" or " tools")
    local rest = #list - i
    local tail = rest > 0 and ("... and " .. rest .. " more namespaces\n") or ""
    if max and used + #line + 1 + #tail > max then
      lines[#lines + 1] = "... and " .. (#list - i + 1) .. " more namespaces"
      break
    end
    lines[#lines + 1] = line
    used = used + #line + 1
  end
  return concat(lines, "\n") .. (#lines > 0 and "\n" or "")
end

-- ---- the preamble ------------------------------------------------------------------

-- A checklist for a model that writes JavaScript or Python: what differs in Lua, and
-- how this sandbox answers. Every mode keeps it whole, and says how to read the rest.
local PREAMBLE = [[
Write one Lua 5.4 script; return the result; print() logs.
Not JS/Python: arrays start at 1; #t is length; .. joins strings; ~= is not-equal;
-- comments; local declares; no +=.
Tools return directly (no await): local r = tools.x.y{a = 1}; a failure raises
{code, message}: pcall(tools.x.y, args) where failure is expected.
json.null is JSON null: truthy, not nil; nil omits a field. json.array{} sends [];
json.encode/decode; parallel(f, g) runs calls at once.]]

local HEADER = {
  full = "Tools; more with tools.describe(name), tools.search(words):",
  compact = "Tools, one line each; in a script tools.describe(name) gives a tool's " ..
            "fields and result, tools.search(words) finds tools:",
  grouped = "Tools by namespace, called as tools.ns.name{...}; in a script " ..
            "tools.describe(\"ns.name\") gives a tool's fields and result, " ..
            "tools.search(words) finds tools:",
  counts = "Tools by namespace (too many to list); in a script tools.search(words) " ..
           "finds tools, tools.list() names them, tools.describe(name) gives a tool's " ..
           "fields and result:",
}

-- The most characters of run_lua's description, by default: Claude Code cuts a tool's
-- description past 2,048, and a model that reads a cut API invents the rest.
M.DESCRIPTION_MAX = 2048

-- The preamble alone (the sandbox, for the model).
function M.preamble()
  return PREAMBLE .. "\n"
end

-- The length of s as a client counts it: UTF-16 code units (bytes if s is not UTF-8).
local function text_len(s)
  local n = utf8.len(s)
  if not n then return #s end
  for _, c in utf8.codes(s) do if c >= 0x10000 then n = n + 1 end end
  return n
end
M.text_len = text_len

local function in_mode(tools, mode, max)
  if mode == "compact" then
    return PREAMBLE .. "\n" .. HEADER.compact .. "\n" .. M.compact_api(tools)
  elseif mode == "grouped" then
    return PREAMBLE .. "\n" .. HEADER.grouped .. "\n" .. M.grouped_api(tools)
  elseif mode == "counts" then
    local head = PREAMBLE .. "\n" .. HEADER.counts .. "\n"
    return head .. M.counts_api(tools, max and max - #head)
  end
  return PREAMBLE .. "\n" .. HEADER.full .. "\n\n" .. M.lua_api(tools)
end

-- The whole description: the preamble, then the tools
--   "full"     each tool's call, fields, rules and result;
--   "compact"  one line a tool: required fields and result keys;
--   "grouped"  one line a namespace: its tools' names;
--   "counts"   one line a namespace: how many tools;
--   "auto"     the first of these that fits in max characters (M.DESCRIPTION_MAX);
--   "fit"      the same from "compact" on (never the full text).
-- Returns the text and the mode chosen.
function M.describe(tools, mode, max)
  if #tools == 0 then return M.preamble(), "full" end
  if mode ~= "auto" and mode ~= "fit" then
    mode = HEADER[mode] and mode or "full"
    return in_mode(tools, mode), mode
  end
  max = max or M.DESCRIPTION_MAX
  local order = mode == "auto" and { "full", "compact", "grouped" } or { "compact", "grouped" }
  for _, m in ipairs(order) do
    local text = in_mode(tools, m)
    if text_len(text) <= max then return text, m end
  end
  return in_mode(tools, "counts", max), "counts"
end

-- ---- the run_lua tool --------------------------------------------------------------

-- The tool definition of run_lua for an MCP, OpenAI or Anthropic tool list: the
-- description (M.describe with opts.mode, default "full", and opts.max) and the code
-- argument. opts.session adds the session argument.
function M.run_lua_tool(tools, opts)
  opts = opts or {}
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
    description = (M.describe(tools, opts.mode, opts.max)),
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
