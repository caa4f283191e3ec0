-- policy.lua: the parser of the constraint language of policy rules ("where"), run with
-- LPeg in a trusted Lua state when the config is loaded (engine/host/policy.c). It turns
-- the text into a tree of plain tables that policy.c compiles to its C form; nothing of
-- it runs when a tool is called.
--
--   condition := or
--   or        := and {'or' and}
--   and       := unary {'and' unary}
--   unary     := 'not' unary | '(' condition ')' | clause
--   clause    := path op value                      amount <= 10000, user.name == "x"
--              | '#' path op number                  #labels <= 5 (length)
--              | path 'in' '{' value {',' value} '}' currency in {"EUR", "USD"}
--              | path ':' test '(' [value] ')'       repo:starts_with("acme/")
--              | path test value                     repo starts_with "acme/"
--              | 'exists' '(' path ')' | path 'exists' | path ':exists()'
--              | path                                draft (true when it is JSON true)
--   path      := name {'.' name | '[' integer ']' | '[' string ']'}   items[1].sku (from 1)
--   op        := '==' | '~=' | '!=' | '<' | '<=' | '>' | '>='
--   test      := starts_with | ends_with | contains | matches (only with "regex": true)
--   value     := string ('..' or "..") | number | true | false | null
--
-- M.compile(text, regex) -> tree | nil, column, message. Nodes: {k = "and"|"or", ...},
-- {k = "not", x}, and clauses {k = "cmp"|"in"|"starts_with"|"ends_with"|"contains"|
-- "matches"|"exists"|"truth", path = {"key", 2, ...}, op =, len =, lit =, set =,
-- text = the clause's source}. A path step is a string (a key) or an integer (an index
-- counted from 1, as in the script's Lua). A literal is {t = "string"|"number"|
-- "boolean"|"null", v = value}.
local lpeg = require("lpeg")
local P, R, S, C, Cp, Cs, Cmt = lpeg.P, lpeg.R, lpeg.S, lpeg.C, lpeg.Cp, lpeg.Cs, lpeg.Cmt
local V = lpeg.V

local M = {}

-- A failure at the current position: raised at once, so that the message names the
-- place where the text stopped making sense rather than where backtracking ended.
local function fail (msg)
  return Cmt(P(true), function (_, pos) error({ col = pos, msg = msg }, 0) end)
end

local function raise (col, msg) error({ col = col, msg = msg }, 0) end

local ws = S(" \t\r\n") ^ 0
local idstart = R("az", "AZ") + P("_")
local idchar = idstart + R("09")
local ident = idstart * idchar ^ 0
local keywords = { ["and"] = true, ["or"] = true, ["not"] = true, ["in"] = true,
  ["true"] = true, ["false"] = true, ["null"] = true, ["exists"] = true }
local function kw (word) return P(word) * -idchar end
local name = Cmt(C(ident), function (_, pos, id)
  if keywords[id] then return false end
  return pos, id
end)

-- strings: '...' or "...", with \\ \' \" \n \t \r escapes
local escapes = { n = "\n", t = "\t", r = "\r" }
local function quoted (q)
  local esc = P("\\") * (C(1) / function (ch) return escapes[ch] or ch end)
  local body = Cs((esc + (1 - S(q .. "\\\n"))) ^ 0)
  return P(q) * body * (P(q) + fail("unterminated string: expected a closing " .. q))
end
local str = quoted('"') + quoted("'")
local digits = R("09") ^ 1
local number = C(P("-") ^ -1 * digits * (P(".") * digits) ^ -1
                 * (S("eE") * S("+-") ^ -1 * digits) ^ -1) / tonumber

local value = str / function (s) return { t = "string", v = s } end
  + number / function (n) return { t = "number", v = n } end
  + kw("true") * lpeg.Cc({ t = "boolean", v = true })
  + kw("false") * lpeg.Cc({ t = "boolean", v = false })
  + kw("null") * lpeg.Cc({ t = "null" })
-- a value with its column, for the checks made once the clause is known
local cvalue = Cp() * value

local function index_step (col, n)
  if math.type(n) ~= "integer" or n < 1 then
    raise(col, "an index counts from 1, as in Lua: items[1] is the first item")
  end
  return n
end
local step = P(".") * (name + fail("expected a name after '.'"))
  + P("[") * ws * ((Cp() * C(digits) / function (col, d) return index_step(col, tonumber(d)) end)
                   + str
                   + fail("expected an index (a number from 1) or a quoted key inside [ ]"))
  * ws * (P("]") + fail("expected ']'"))
local path = lpeg.Ct((name + #P("[") * step) * step ^ 0)

local ops = { "==", "~=", "!=", "<=", ">=", "<", ">" }
local cmpop = P(false)
for _, op in ipairs(ops) do
  cmpop = cmpop + C(P(op)) * ws * (cvalue + fail("expected a value after '" .. op .. "'"))
end
local single_eq = P("=") * -P("=") * fail("use == to compare ('=' alone is not an operator)")

local tests = { starts_with = true, ends_with = true, contains = true, matches = true,
  exists = true }
local testname = Cmt(Cp() * C(ident), function (_, pos, col, id)
  if not tests[id] then
    raise(col, "unknown test '" .. id .. "': use starts_with, ends_with, contains, "
      .. "matches or exists")
  end
  return pos, col, id
end)

local function lit_name (lit)
  if lit.t == "string" then return string.format("%q", lit.v) end
  return tostring(lit.t == "null" and "null" or lit.v)
end

-- The clauses, built once the whole clause has matched. `regex` is the rule's opt-in.
local function build (regex)
  local function cmp (from, p, op, vcol, lit, to, len)
    if op == "!=" then op = "~=" end
    if len and lit.t ~= "number" then
      raise(vcol, "#" .. p[1] .. " compares a length with a number, not " .. lit_name(lit))
    end
    if (op ~= "==" and op ~= "~=") and lit.t ~= "number" and lit.t ~= "string" then
      raise(vcol, "'" .. op .. "' compares numbers or strings, not " .. lit_name(lit))
    end
    return { k = "cmp", path = p, op = op, len = len or false, lit = lit, from = from,
             to = to }
  end
  local function test (from, p, col, t, vcol, lit, to)
    if t == "exists" then
      if lit then raise(vcol, "exists takes no value: write path:exists() or exists(path)") end
      return { k = "exists", path = p, from = from, to = to }
    end
    if lit == nil then raise(vcol, t .. " needs a value: " .. t .. "(\"text\")") end
    if t == "matches" and not regex then
      raise(col, "matches needs \"regex\": true in the rule (regular expressions are opt-in)")
    end
    if t ~= "contains" and lit.t ~= "string" then
      raise(vcol, t .. " takes a string, not " .. lit_name(lit))
    end
    return { k = t, path = p, lit = lit, from = from, to = to, col = vcol }
  end
  local method = P(":") * ws * (testname + fail("expected a test after ':' (starts_with, "
      .. "ends_with, contains, matches, exists)"))
    * ws * (P("(") + fail("expected '(' after the test's name")) * ws
    * Cp() * (value + lpeg.Cc(nil)) * ws * (P(")") + fail("expected ')'"))
  local infix = Cmt(Cp() * C(ident) * -idchar, function (_, pos, col, id)
      if id == "exists" or not tests[id] then return false end
      return pos, col, id
    end) * ws * Cp() * (value + fail("expected a value after the test"))
  local set = P("{") * ws * lpeg.Ct((cvalue * (ws * P(",") * ws * cvalue) ^ 0
      * (ws * P(",")) ^ -1) ^ -1) * ws
    * (P("}") + fail("expected a value, ',' or '}' in the set"))

  local function in_node (from, p, incol, vals, to)
    local set_ = {}
    for i = 1, #vals, 2 do set_[#set_ + 1] = vals[i + 1] end
    if #set_ == 0 then raise(incol, "the set after 'in' is empty: nothing would be in it") end
    return { k = "in", path = p, set = set_, from = from, to = to }
  end

  local clause =
      Cp() * P("#") * ws * (path + fail("expected a path after '#'")) * ws
        * (cmpop + fail("expected a comparison after the length (#labels <= 5)")) * Cp()
        / function (from, p, op, vcol, lit, to) return cmp(from, p, op, vcol, lit, to, true) end
    + Cp() * kw("exists") * ws * P("(") * ws * (path + fail("expected a path inside exists()"))
        * ws * (P(")") + fail("expected ')'")) * Cp()
        / function (from, p, to) return { k = "exists", path = p, from = from, to = to } end
    + Cp() * path * ws * (
          cmpop * Cp() / function (op, vcol, lit, to) return "cmp", op, vcol, lit, to end
        + single_eq
        + Cp() * kw("in") * ws * (set + fail("expected '{' after 'in': x in {\"a\", \"b\"}"))
            * Cp() / function (incol, vals, to) return "in", incol, vals, to end
        + method * Cp() / function (col, t, vcol, lit, to)
            if to == nil then to, lit = lit, nil end  -- no value: Cc(nil) left no capture
            return "test", col, t, vcol, lit, to
          end
        + infix * Cp() / function (col, t, vcol, lit, to) return "test", col, t, vcol, lit, to end
        + Cp() * kw("exists") * Cp()
            / function (col, to) return "test", col, "exists", col, nil, to end
        + Cp() / function (to) return "truth", to end)
      / function (from, p, kind, ...)
          if kind == "cmp" then
            local op, vcol, lit, to = ...
            return cmp(from, p, op, vcol, lit, to, false)
          elseif kind == "in" then
            local incol, vals, to = ...
            return in_node(from, p, incol, vals, to)
          elseif kind == "test" then
            local col, t, vcol, lit, to = ...
            return test(from, p, col, t, vcol, lit, to)
          end
          local to = ...
          return { k = "truth", path = p, from = from, to = to }
        end

  local function list (k)
    return function (from, first, ...)
      local n = select("#", ...)
      if n == 1 then return first end
      local node = { k = k, from = from, to = select(n, ...), first, ... }
      node[#node] = nil  -- the end position, kept in `to`
      return node
    end
  end
  return P({
    "top",
    top = ws * V("or_") * ws * (-P(1) + fail("expected 'and', 'or' or the end of the condition")),
    or_ = (ws * Cp() * V("and_") * (ws * kw("or") * V("and_")) ^ 0 * Cp()) / list("or"),
    and_ = (ws * Cp() * V("unary") * (ws * kw("and") * V("unary")) ^ 0 * Cp()) / list("and"),
    unary = ws * (Cp() * kw("not") * V("unary") * Cp()
        / function (from, x, to) return { k = "not", x, from = from, to = to } end
      + P("(") * V("or_") * ws * (P(")") + fail("expected ')'"))
      + clause
      + fail("expected a condition: a path (amount, items[1].sku), #path, exists(path), "
          .. "not or '('")),
  })
end

local grammars = {}

-- The clause texts, from the positions the tree holds.
local function texts (node, src)
  if node.from then
    node.text = src:sub(node.from, node.to - 1):gsub("%s+$", "")
    node.from, node.to, node.col = nil, nil, nil
  end
  for _, child in ipairs(node) do texts(child, src) end
  return node
end

function M.compile (src, regex)
  local key = regex and "re" or "plain"
  grammars[key] = grammars[key] or build(regex)
  if src:find("^%s*$") then return nil, 1, "the condition is empty" end
  local ok, res = pcall(lpeg.match, grammars[key], src)
  if not ok then
    if type(res) == "table" then return nil, res.col, res.msg end
    return nil, 1, "the condition is too complex to read (" .. tostring(res) .. ")"
  end
  if res == nil then return nil, 1, "the condition cannot be read" end
  return texts(res, src)
end

return M
