-- describe_recursion_spec.lua: schemas that contain themselves are written by name, each
-- definition once, and every schema of the JSON Schema Test Suite describes without an
-- error and within a size budget.
local D = require("lua.describe")
local F = require("bench.describe.fixture")

local function api(input, output)
  return D.lua_api({ { name = "t.x", input = input, output = output } })
end

describe("a recursive schema", function()
  it("is written by name once: a tree of nodes referenced once", function()
    assert.equal([[
t.x{root: node}
node = {name: string, children?: node[]}
]], api({ type = "object", required = { "root" },
          properties = { root = { ["$ref"] = "#/$defs/node" } },
          ["$defs"] = { node = { type = "object", required = { "name" }, properties = {
            name = { type = "string" },
            children = { type = "array", items = { ["$ref"] = "#/$defs/node" } } } } } }))
  end)

  it("that is not an object (a JSON value) keeps its alternatives", function()
    assert.equal([[
t.x{
 doc: value -- Any JSON.
}
value = string|number|boolean|value[]|{[string]: value}|json.null
]], api({ type = "object", required = { "doc" },
          properties = { doc = { ["$ref"] = "#/$defs/value", description = "Any JSON." } },
          ["$defs"] = { value = { anyOf = { { type = "string" }, { type = "number" },
            { type = "boolean" }, { type = "null" },
            { type = "array", items = { ["$ref"] = "#/$defs/value" } },
            { type = "object", additionalProperties = { ["$ref"] = "#/$defs/value" } } } } } }))
  end)

  it("puts the definition's description and rules on its own line", function()
    assert.equal([[
t.x{table: string, where?: expr}
expr = {"and"?: expr[] #<=10, eq?: any, field?: string, "not"?: expr} -- A condition.
]], api({ type = "object", required = { "table" },
          properties = { table = { type = "string" }, where = { ["$ref"] = "#/definitions/expr" } },
          definitions = { expr = { type = "object", description = "A condition.",
            properties = { field = { type = "string" }, eq = {},
              ["and"] = { type = "array", maxItems = 10,
                          items = { ["$ref"] = "#/definitions/expr" } },
              ["not"] = { ["$ref"] = "#/definitions/expr" } } } } }))
  end)

  it("that is the argument table itself (\"#\") is named args; the result, result", function()
    assert.equal([[
t.x{children?: args[], name?: string} -> {next?: result}
-- args: the argument table itself
-- result: the result itself
]], api({ type = "object", properties = { name = { type = "string" },
            children = { type = "array", items = { ["$ref"] = "#" } } } },
        { type = "object", properties = { ["next"] = { ["$ref"] = "#" } } }))
  end)

  it("reached through a subschema's $id or an $anchor is named too", function()
    local text = api({ type = "object", properties = {
      a = { ["$ref"] = "item" }, b = { ["$ref"] = "#leaf" } },
      ["$defs"] = {
        item = { ["$id"] = "http://x.test/item", type = "object",
                 properties = { sub = { ["$ref"] = "item" } } },
        leaf = { ["$anchor"] = "leaf", type = "object",
                 properties = { up = { ["$ref"] = "#leaf" } } } } })
    assert.truthy(text:find("item = {sub?: item}", 1, true), text)
    assert.truthy(text:find("leaf = {up?: leaf}", 1, true), text)
  end)

  it("does not loop on a reference to itself or a chain of references", function()
    assert.equal("t.x{a?: any, b?: any}\n", api({ type = "object", properties = {
      a = { ["$ref"] = "#/properties/a" }, b = { ["$ref"] = "#/$defs/c" } },
      ["$defs"] = { c = { ["$ref"] = "#/$defs/d" }, d = { ["$ref"] = "#/$defs/c" } } }))
  end)

  it("keeps two definitions of the same name apart", function()
    local text = api({ type = "object", properties = {
      a = { ["$ref"] = "#/$defs/one/node" }, b = { ["$ref"] = "#/$defs/two/node" } },
      ["$defs"] = {
        one = { node = { type = "object",
                         properties = { x = { ["$ref"] = "#/$defs/one/node" } } } },
        two = { node = { type = "object",
                         properties = { y = { ["$ref"] = "#/$defs/two/node" } } } } } })
    assert.truthy(text:find("node = {x?: node}", 1, true), text)
    assert.truthy(text:find("node2 = {y?: node2}", 1, true), text)
  end)

  it("nested 300 deep with a reference back to the top describes without an error", function()
    local root = { type = "object", properties = {} }
    local at = root
    for _ = 1, 300 do
      local inner = { type = "object", properties = {} }
      at.properties.x = inner
      at = inner
    end
    at.properties.back = { ["$ref"] = "#" }
    local ok, text = pcall(api, root)
    assert.is_true(ok, text)
    assert.truthy(text:find("x?: any", 1, true), text:sub(1, 200))
  end)

  it("in a Lua table that contains itself is named, not followed forever", function()
    local s = { type = "object", properties = {} }
    s.properties.child = { type = "object", properties = { up = s } }
    assert.equal("t.x{child?: {up?: args}}\n-- args: the argument table itself\n", api(s))
  end)
end)

-- The suite's folder: $TP_SCHEMA_SUITE, else ../shared/json-schema-test-suite from the
-- repository (the main worktree's, when this is a linked one), as spec/c/test_schema_suite.c.
local function suite_dir()
  local env = os.getenv("TP_SCHEMA_SUITE")
  if env and env ~= "" then return env end
  local candidates = { "../shared/json-schema-test-suite" }
  local p = io.popen("git rev-parse --path-format=absolute --git-common-dir 2>/dev/null")
  local common = p and p:read("l")
  if p then p:close() end
  if common then
    candidates[#candidates + 1] = common:gsub("/%.git/?$", "") ..
                                  "/../shared/json-schema-test-suite"
  end
  for _, d in ipairs(candidates) do
    local f = io.open(d .. "/tests/draft2020-12/ref.json", "rb")
    if f then f:close() return d end
  end
  error("the JSON Schema Test Suite is missing: set TP_SCHEMA_SUITE to its folder")
end

-- The size of a schema: its keys' and strings' characters, 4 a number or boolean.
local function weight(s, seen)
  seen = seen or {}
  if type(s) == "string" then return #s end
  if type(s) ~= "table" then return 4 end
  if seen[s] then return 0 end
  seen[s] = true
  local n = 2
  for k, v in pairs(s) do n = n + weight(k, seen) + weight(v, seen) end
  return n
end

describe("every schema of the JSON Schema Test Suite", function()
  it("describes, as input and as result, without an error and within its budget", function()
    local dir = suite_dir()
    local null = setmetatable({}, { __name = "null" })
    local n, problems = 0, {}
    for _, dialect in ipairs({ "draft2020-12", "draft7" }) do
      local ls = io.popen("find " .. dir .. "/tests/" .. dialect .. " -name '*.json' | sort")
      for file in ls:lines() do
        local f = assert(io.open(file, "rb"))
        local cases, order = F.decode(f:read("a"), null)
        f:close()
        for i, c in ipairs(cases) do
          n = n + 1
          local tool = { name = "suite.case", description = c.description,
                         input = c.schema, output = c.schema, order = order }
          local ok, text = pcall(D.describe, { tool }, "full")
          if not ok then
            problems[#problems + 1] = ("%s #%d: %s"):format(file, i, text)
          else
            -- the budget: 200 characters, and 3 for each of the schema (written twice:
            -- as the input and as the result)
            local body, limit = #text - #D.preamble(), 200 + 2 * 3 * weight(c.schema)
            if body > limit then
              problems[#problems + 1] = ("%s #%d: %d characters, over %d"):format(file, i,
                                                                              body, limit)
            end
          end
        end
      end
      ls:close()
    end
    assert.is_true(n > 700, n .. " cases")
    assert.same({}, problems)
  end)
end)
