-- describe_spec.lua: lua/describe.lua, what the model reads: LuaCATS annotations from
-- the tools' schemas, the sandbox preamble, the run_lua tool definition and search.
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
---@class notes.search.Args
---@field filter? notes.search.Args.filter Extra filter.
---@field limit? integer (1..50; default 10)
---@field query string Words to find. (length 1..200)
---@field since? string (format date)
---@field sort? "date"|"score" Order. (one of "date", "score")
---@field tags? string[] (items <= 5; each pattern ^[a-z]+$)

---@class notes.search.Args.filter
---@field author string
---@field ["max-age"]? number (> 0)

---@class notes.search.Result
---@field hits notes.search.Result.hits[]

---@class notes.search.Result.hits
---@field id integer
---@field title? string|nil

---Search the notes.
---Best first.
---@param args notes.search.Args
---@return notes.search.Result
function tools.notes.search(args) end]]

local TIME_API = [[
---The current time.
---@param args table
---@return any
function tools.time.now(args) end]]

describe("describe.lua_api", function()
  it("writes classes, fields, constraints and the function of a tool, exactly", function()
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

  it("maps scalar, nullable, map, union and $ref schemas", function()
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
---@class x.y.Args
---@field any? any
---@field at? x.y.point
---@field flag? true (always true)
---@field labels? table<string, string>
---@field v? string|integer

---@class x.y.point
---@field x? number

---@param args x.y.Args
---@return string # (length <= 10)
function tools.x.y(args) end
]], api)
  end)
end)

describe("describe.preamble", function()
  it("explains the sandbox: one script, libraries, tool errors, parallel, result", function()
    local p = D.preamble()
    for _, needle in ipairs({ "Lua 5.4", "string, table, math, utf8, coroutine",
        "os.time, os.clock, os.date", "json.encode", "json.decode", "json.null",
        "json.array", "io, require, debug, os.execute", "tools.fs.read{", "err.code",
        "err.message", "pcall", "parallel(f1, f2, ...)", "raises the first",
        "print(...) goes to the logs", "return value is the result", "Limits" }) do
      assert.truthy(p:find(needle, 1, true), needle)
    end
  end)
end)

describe("describe.run_lua_tool", function()
  it("has a name, a description with the preamble and the API, and a code argument", function()
    local t = D.run_lua_tool({ notes_search() })
    assert.equal("run_lua", t.name)
    assert.equal(D.preamble() .. "\nThe tools (LuaCATS annotations):\n\n" ..
      NOTES_API .. "\n", t.description)
    assert.same({ type = "object", required = { "code" }, properties = {
      code = { type = "string",
               description = "The Lua 5.4 script to run; its return value is the result." },
    } }, t.inputSchema)
    assert.is_nil(t.inputSchema["$schema"])
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
