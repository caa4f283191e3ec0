-- The description of the 13-tool fixture (spec/fixtures/describe/tools13.json) stays
-- within its token budget, counted with bench/describe/tokens.lua, and the compact
-- description of 25 tools within the 2,048 characters at which Claude Code cuts a
-- tool's description. `make bench` compares the same text with Cloudflare's codemode
-- (describe_tokens_ratio).
local D = require("lua.describe")
local F = require("bench.describe.fixture")
local T = require("bench.describe.tokens")

local FIXTURE = "spec/fixtures/describe/tools13.json"

-- Measured when the budget was set: 1708 tokens with this counter (1705 with o200k);
-- Cloudflare's codemode 0.5.6 writes 2227 (2151 with o200k) for the same tools. The
-- budget is 0.8 x Cloudflare's count: past it the description is no longer smaller
-- than Cloudflare's by the margin issue 9 asks for.
local BUDGET = math.floor(0.8 * 2227)

describe("the description of the 13-tool fixture", function()
  local tools = F.load(FIXTURE)

  it("is within its token budget", function()
    local n = T.count(D.describe(tools, "full"))
    assert.is_true(n <= BUDGET, ("%d tokens, over the budget of %d"):format(n, BUDGET))
  end)

  it("keeps every tool and the fields of each, required first", function()
    local text = D.describe(tools, "full")
    for _, t in ipairs(tools) do
      assert.truthy(text:find("\n" .. t.name .. "{", 1, true), t.name)
    end
    assert.truthy(text:find("github.create_issue{ -- Create an issue in a GitHub repository."
      .. "\n  owner: string -- Account owner of the repository.\n  repo: string", 1, true))
  end)

  it("shows the rules validation enforces that a type cannot say", function()
    local text = D.describe(tools, "full")
    for _, rule in ipairs({ "-- not both head and tail", "-- reply_broadcast needs thread_ts",
        "-- at least one of customer | source", "-- at least one of text | blocks",
        "-- if useDefault = false: overrides required",
        '-- if method in "GET"|"HEAD": body not allowed', "origin: {number -90..90, number "
        .. "-180..180}", 'contains "triaged"', "#keys>=1", "keys /^[A-Za-z0-9-]+$/",
        "milestone?: integer|json.null", "metadata?: {[string]: string #<=500} #keys<=50, "
        .. "keys #<=40", "location: (string #>=1)|{lat: number, lon: number}" }) do
      assert.truthy(text:find(rule, 1, true), rule)
    end
    -- additionalProperties: false, once for each tool whose input says it
    local closed = select(2, text:gsub("%-%- no other fields", ""))
    assert.are.equal(3, closed)
  end)

  it("is the same text each time", function()
    assert.equal(D.describe(tools, "full"), D.describe(F.load(FIXTURE), "full"))
  end)
end)

describe("the compact description", function()
  it("of 25 tools fits in 2,048 characters", function()
    local tools = {}
    for _, t in ipairs(F.load(FIXTURE)) do tools[#tools + 1] = t end
    for _, t in ipairs(F.load(FIXTURE)) do
      if #tools == 25 then break end
      local copy = {}
      for k, v in pairs(t) do copy[k] = v end
      copy.name = t.name:gsub("%.", ".v2_", 1)
      tools[#tools + 1] = copy
    end
    assert.equal(25, #tools)
    local text = D.describe(tools, "compact")
    assert.is_true(#text <= 2048, #text .. " characters")
    local n = 0
    for _ in text:match("finds tools:\n(.*)$"):gmatch("[%w_.]+{[^\n]*}\n") do n = n + 1 end
    assert.equal(25, n)
  end)
end)
