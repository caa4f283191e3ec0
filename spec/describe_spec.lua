-- describe_spec.lua: lua/describe.lua, what the model reads: each tool's call from its
-- schemas, the sandbox preamble, the run_lua tool definition and search.
local D = require("lua.describe")

local function notes_search()
  return {
    name = "notes.search",
    description = "Search the notes.\nBest first.",
    input = {
      type = "object",
      required = { "query" },
      additionalProperties = false,
      properties = {
        query = { type = "string", minLength = 1, maxLength = 200, description = "Words to find." },
        limit = { type = "integer", minimum = 1, maximum = 50, default = 10 },
        sort = { type = "string", enum = { "date", "score" }, description = "Order." },
        tags = { type = "array", items = { type = "string", pattern = "^[a-z]+$" }, maxItems = 5 },
        since = { type = "string", format = "date" },
        filter = {
          type = "object",
          description = "Extra filter.",
          properties = { author = { type = "string" },
                         ["max-age"] = { type = "number", exclusiveMinimum = 0 } },
          required = { "author" },
        },
      },
    },
    output = {
      type = "object",
      required = { "hits" },
      properties = {
        hits = { type = "array", items = { type = "object", required = { "id" }, properties = {
          id = { type = "integer" }, title = { type = { "string", "null" } } } } },
      },
    },
  }
end

local function time_now()
  return { name = "time.now", description = "The current time.",
           input = { type = "object", properties = {} } }
end

local NOTES_API = [[
-- Search the notes.
-- Best first.
notes.search{
 query: string #1..200 -- Words to find.
 filter?: {author: string, "max-age"?: number >0} -- Extra filter.
 limit?: integer 1..50 = 10
 since?: string(date)
 sort?: "date"|"score" -- Order.
 tags?: (string /^[a-z]+$/)[] #<=5
} -> {hits: {id: integer, title?: string|json.null}[]}]]

local TIME_API = [[
time.now{} -- The current time.]]

describe("describe.lua_api", function()
  it("writes a tool's call, fields, constraints and result, exactly", function()
    assert.equal(NOTES_API .. "\n", D.lua_api({ notes_search() }))
  end)

  it("sorts the tools by name and separates them by a blank line", function()
    assert.equal(NOTES_API .. "\n\n" .. TIME_API .. "\n",
      D.lua_api({ time_now(), notes_search() }))
  end)

  it("gives the same text for the same tools, whatever the table order", function()
    local a = D.lua_api({ notes_search(), time_now() })
    for _ = 1, 20 do
      -- fresh tables: new hash layouts
      assert.equal(a, D.lua_api({ time_now(), notes_search() }))
    end
  end)

  it("is empty for no tools", function()
    assert.equal("", D.lua_api({}))
  end)

  it("maps scalar, const, map, union and $ref schemas", function()
    local api = D.lua_api({ {
      name = "x.y",
      input = {
        type = "object",
        ["$defs"] = { point = { type = "object", properties = { x = { type = "number" } } } },
        properties = {
          at = { ["$ref"] = "#/$defs/point" },
          flag = { type = "boolean", const = true },
          labels = { type = "object", additionalProperties = { type = "string" } },
          v = { anyOf = { { type = "string" }, { type = "integer" } } },
          any = {},
        },
      },
      output = { type = "string", maxLength = 10 },
    } })
    assert.equal([[
x.y{
 any?: any
 at?: {x?: number}
 flag?: true
 labels?: {[string]: string}
 v?: string|integer
} -> string #<=10
]], api)
  end)

  it("keeps the schema's field order when it is known, required fields first", function()
    local props = { b = { type = "string" }, a = { type = "integer" }, c = { type = "boolean" } }
    local tool = { name = "o.k", input = { type = "object", properties = props,
                                           required = { "c" } },
                   order = { [props] = { "b", "a", "c" } } }
    assert.equal("o.k{c: boolean, b?: string, a?: integer}\n", D.lua_api({ tool }))
    tool.order = nil  -- a Lua plugin's table has no order: required, then sorted
    assert.equal("o.k{c: boolean, a?: integer, b?: string}\n", D.lua_api({ tool }))
  end)

  it("writes the rules that involve several fields in a few words", function()
    local api = D.lua_api({ {
      name = "r.w",
      input = {
        type = "object",
        properties = {
          head = { type = "integer" }, tail = { type = "integer" },
          mode = { enum = { "a", "b" } }, extra = { type = "string" },
          point = { type = "array",
                    prefixItems = { { type = "number", minimum = -90, maximum = 90 },
                                    { type = "number" } } },
          tags = { type = "array", items = { type = "string" }, contains = { const = "x" } },
          meta = { type = "object", minProperties = 1, propertyNames = { pattern = "^[a-z]+$" },
                   additionalProperties = { type = "string" } },
        },
        ["not"] = { required = { "head", "tail" } },
        dependentRequired = { tail = { "mode" } },
        ["if"] = { properties = { mode = { const = "b" } } },
        ["then"] = { required = { "extra" } },
        oneOf = { { required = { "head" } }, { required = { "tail" } } },
      },
    } })
    assert.equal([[
r.w{
 extra?: string
 head?: integer
 meta?: {[string]: string} #keys>=1, keys /^[a-z]+$/
 mode?: "a"|"b"
 point?: {number -90..90, number}
 tags?: string[] contains "x"
 tail?: integer
 -- not both head and tail
 -- exactly one of head | tail
 -- tail needs mode
 -- if mode = "b": extra required
}
]], api)
  end)

  it("writes a $defs entry used twice once, by name, after the call", function()
    local api = D.lua_api({ {
      name = "c.e",
      input = {
        type = "object",
        ["$defs"] = { time = { type = "object", properties = { at = { type = "string" } },
                               required = { "at" } } },
        properties = { start = { ["$ref"] = "#/$defs/time" },
                       stop = { ["$ref"] = "#/$defs/time" } },
        required = { "start", "stop" },
      },
    } })
    assert.equal("c.e{start: time, stop: time}\ntime = {at: string}\n", api)
  end)
end)

describe("describe.compact_api", function()
  it("writes one line per tool: its required fields, ... for more, its result's keys", function()
    assert.equal("notes.search{query, ...} -> {hits}\ntime.now{}\n",
      D.compact_api({ time_now(), notes_search() }))
  end)
end)

describe("describe.preamble", function()
  it("is a checklist of what differs from JavaScript and Python", function()
    local p = D.preamble()
    for _, needle in ipairs({ "Lua 5.4", "arrays start at 1", "#t is length",
        ".. joins strings", "~= is not-equal", "-- comments", "no await", "no +=",
        "local r = tools.x.y{a = 1}", "{code, message}", "pcall(tools.x.y, args) where "
        .. "failure is expected", "json.null is JSON null: truthy, not nil",
        "nil omits a field", "json.array{} sends []", "parallel(f, g)" }) do
      assert.truthy(p:find(needle, 1, true), needle)
    end
  end)
end)

describe("describe.run_lua_tool", function()
  it("has a name, a description with the preamble and the API, and a code argument", function()
    local t = D.run_lua_tool({ notes_search() })
    assert.equal("run_lua", t.name)
    assert.equal(D.preamble() .. "Tools; more with tools.describe(name), " ..
      "tools.search(words):\n\n" .. NOTES_API .. "\n", t.description)
    assert.same({ type = "object", required = { "code" }, properties = {
      code = { type = "string",
               description = "The Lua 5.4 script to run; its return value is the result." },
    } }, t.inputSchema)
    assert.is_nil(t.inputSchema["$schema"])
  end)

  it("lists one line per tool in compact mode", function()
    local t = D.run_lua_tool({ notes_search(), time_now() }, { mode = "compact" })
    assert.equal(D.preamble() .. "Tools, one line each; in a script tools.describe(name) "
      .. "gives a tool's fields and result, tools.search(words) finds tools:\n"
      .. "notes.search{query, ...} -> {hits}\ntime.now{}\n", t.description)
  end)

  it("adds the session argument only when asked", function()
    local t = D.run_lua_tool({}, { session = true })
    assert.equal("string", t.inputSchema.properties.session.type)
    assert.same({ "code" }, t.inputSchema.required)
    assert.equal(D.preamble(), t.description)
    assert.is_nil(D.run_lua_tool({}).inputSchema.properties.session)
  end)
end)

describe("describe.search", function()
  local tools = {
    { name = "fs.read", description = "Read a text file of the workspace." },
    { name = "fs.write", description = "Write a file; the file is replaced." },
    { name = "kv.get", description = "Read the value stored under a key." },
    { name = "time.now", description = "The current time." },
  }

  it("ranks by words in the name (weighted) and the description, best first", function()
    assert.same({
      { name = "fs.write", description = "Write a file; the file is replaced.", score = 5 },
      { name = "fs.read", description = "Read a text file of the workspace.", score = 4 },
    }, D.search(tools, "FS file"))
    local names = {}
    for i, h in ipairs(D.search(tools, "read")) do names[i] = h.name .. "=" .. h.score end
    assert.same({ "fs.read=4", "kv.get=1" }, names)
  end)

  it("breaks ties by name and lists every tool for an empty query", function()
    local names = {}
    for i, h in ipairs(D.search(tools, "  ")) do names[i] = h.name .. "=" .. h.score end
    assert.same({ "fs.read=0", "fs.write=0", "kv.get=0", "time.now=0" }, names)
    names = {}
    for i, h in ipairs(D.search(tools, "the")) do names[i] = h.name end
    assert.same({ "fs.read", "fs.write", "kv.get", "time.now" }, names)  -- all score 1
  end)

  it("returns nothing when no word matches", function()
    assert.same({}, D.search(tools, "weather"))
  end)
end)

describe("describe of a schema that reaches one definition many times", function()
  it("writes it once per place, in linear time (allOf of allOf of the same $ref)", function()
    local defs = { d0 = { type = "integer" } }
    for i = 1, 40 do
      local ref = "#/$defs/d" .. (i - 1)
      defs["d" .. i] = { allOf = { { ["$ref"] = ref }, { ["$ref"] = ref } } }
    end
    assert.equal("h.x{items?: integer[]}\n", D.lua_api({ { name = "h.x", input = {
      type = "object", ["$defs"] = defs,
      properties = { items = { type = "array", items = { ["$ref"] = "#/$defs/d40" } } } } } }))
  end)
end)

describe("an MCP server's tool without an outputSchema", function()
  local up = { name = "gh.list_issues", description = "List issues.", kind = "upstream",
               input = { type = "object", properties = { repo = { type = "string" } },
                         required = { "repo" } } }
  it("reads -> text, and what text becomes, once", function()
    assert.equal("gh.list_issues{repo: string} -> text -- List issues.\n\n" ..
      "-- -> text: the tool's text, unwrapped: JSON text becomes a table, other text a string\n",
      D.lua_api({ up }))
    assert.equal("gh.list_issues{repo} -> text\n-- -> text: the tool's text, unwrapped: JSON " ..
      "text becomes a table, other text a string\n", D.compact_api({ up }))
  end)

  it("is not said of a plugin's tool, whose handler returns a Lua value", function()
    local plugin = {}
    for k, v in pairs(up) do plugin[k] = v end
    plugin.kind = "lua"
    assert.equal("gh.list_issues{repo: string} -- List issues.\n", D.lua_api({ plugin }))
  end)
end)
