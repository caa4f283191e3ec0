-- describe_fit_spec.lua: the description run_lua sends fits in 2,048 characters by default
-- (Claude Code cuts a tool's description there), whatever tools are loaded: the full text
-- when it fits, else one line a tool, else a line a namespace with its tools' names, else
-- the namespaces with counts; every form keeps the checklist and says how to read the rest.
local D = require("lua.describe")
local F = require("bench.describe.fixture")

local MAX = 2048

local S = require("bench.describe.servers")
local four_servers, many, tool = S.four_servers, S.many, S.tool

-- What every form keeps: the whole checklist and how to read the rest.
local function keeps_checklist(text)
  assert.equal(D.preamble(), text:sub(1, #D.preamble()))
  assert.truthy(text:find("tools.describe(", 1, true), "tools.describe")
  assert.truthy(text:find("tools.search(words)", 1, true), "tools.search")
end

describe("run_lua's description, auto", function()
  it("is the full text when it fits", function()
    local tools = F.load("spec/fixtures/describe/tools13.json")
    local few = {}
    for _, t in ipairs(tools) do
      if t.name == "fs.read_file" or t.name == "weather.forecast" or t.name == "email.send" then
        few[#few + 1] = t
      end
    end
    assert.equal(3, #few)
    local text, mode = D.describe(few, "auto")
    assert.equal("full", mode)
    assert.equal(D.describe(few, "full"), text)
    assert.is_true(#text <= MAX)
    keeps_checklist(text)
  end)

  it("with the 13-tool fixture, which does not fit in full, is one line a tool", function()
    local tools = F.load("spec/fixtures/describe/tools13.json")
    assert.is_true(#D.describe(tools, "full") > MAX)
    local text, mode = D.describe(tools, "auto")
    assert.equal("compact", mode)
    assert.is_true(D.text_len(text) <= MAX, #text)
    assert.truthy(text:find("\ngithub.create_issue{owner, repo, title, ...} -> "
      .. "{number, html_url, state}\n", 1, true), text)
    keeps_checklist(text)
  end)

  it("with four common servers (56 tools) groups the names by namespace", function()
    local tools = four_servers()
    assert.is_true(D.text_len(D.describe(tools, "compact")) > MAX)
    local text, mode = D.describe(tools, "auto")
    assert.equal("grouped", mode)
    assert.is_true(D.text_len(text) <= MAX, #text)
    assert.truthy(text:find("\ntools.github: add_issue_comment, create_branch, create_issue, ",
                            1, true), text)
    assert.truthy(text:find("\ntools.slack: add_reaction, get_channel_history, ", 1, true), text)
    local names = 0
    for line in text:gmatch("\ntools%.[%w_]+: ([^\n]*)") do
      for _ in line:gmatch("[%w_]+") do names = names + 1 end
    end
    assert.equal(56, names)
    keeps_checklist(text)
  end)

  it("with 500 tools counts them by namespace", function()
    local text, mode = D.describe(many(500), "auto")
    assert.equal("counts", mode)
    assert.is_true(D.text_len(text) <= MAX, #text)
    assert.truthy(text:find("\ntools.service01: 20 tools\n", 1, true), text)
    assert.truthy(text:find("\ntools.service25: 20 tools\n", 1, true), text)
    keeps_checklist(text)
  end)

  it("with more namespaces than fit lists those that fit and counts the rest", function()
    local tools = {}
    for i = 1, 400 do tools[i] = tool(("namespace_number_%03d"):format(i), "op") end
    local text, mode = D.describe(tools, "auto")
    assert.equal("counts", mode)
    assert.is_true(D.text_len(text) <= MAX, #text)
    local shown = select(2, text:gsub("\ntools%.namespace_number_%d+: 1 tool", ""))
    assert.truthy(text:find("\n... and " .. (400 - shown) .. " more namespaces\n$"), text)
    keeps_checklist(text)
  end)

  it("counts characters as a client does (UTF-16), not bytes", function()
    assert.equal(3, D.text_len("été"))
    assert.equal(2, D.text_len("😀"))
  end)

  it("fit starts from one line a tool; full gives everything whatever its length", function()
    local tools = F.load("spec/fixtures/describe/tools13.json")
    local few = { tools[1] }
    assert.equal("compact", select(2, D.describe(few, "fit")))
    local big = four_servers()
    local text, mode = D.describe(big, "full")
    assert.equal("full", mode)
    assert.is_true(#text > MAX)
  end)
end)

describe("tidepool describe --describe auto with the built-in tools", function()
  it("fits, keeps the checklist and lists every built-in tool", function()
    local p = io.popen("build/tidepool describe --describe auto 2>&1")
    local text = p:read("a")
    p:close()
    assert.is_true(D.text_len(text) <= MAX + 1, #text)  -- + the line end the CLI adds
    keeps_checklist(text)
    for _, name in ipairs({ "kv.get", "kv.set", "kv.list", "kv.delete", "time.now",
                            "time.sleep" }) do
      assert.truthy(text:find("\n" .. name .. "{", 1, true), name)
    end
    assert.truthy(text:find("\ntime.now{} -> {unix_ms, iso}\n", 1, true), text)
  end)
end)
