-- The description of the 13-tool fixture (spec/fixtures/describe/tools13.json; one of its
-- tools, notion.query_database, has a recursive filter) stays within its token budget:
-- 0.75 x what Cloudflare's codemode 0.5.6 writes for the same schemas. Counted with o200k
-- itself (gpt-tokenizer, run by node) when bench/describe/run.sh installed it in build/cf,
-- else with bench/describe/tokens.lua, which follows o200k closely. `make bench` compares
-- the same texts (describe_tokens_ratio, describe_tokens_o200k_ratio).
local D = require("lua.describe")
local F = require("bench.describe.fixture")
local T = require("bench.describe.tokens")

local FIXTURE = "spec/fixtures/describe/tools13.json"

-- Cloudflare's codemode 0.5.6 on the fixture: 2249 o200k tokens, 2253 with tokens.lua.
local CLOUDFLARE = { o200k = 2249, approx = 2253 }
local RATIO = 0.75

-- The o200k count of text, or nil when the tokenizer is not installed.
local function o200k(text)
  local cf = os.getenv("CF_DIR") or "build/cf"
  local f = io.open(cf .. "/node_modules/gpt-tokenizer/package.json", "rb")
  if not f then return nil end
  f:close()
  local path = os.tmpname()
  local out = assert(io.open(path, "wb"))
  out:write(text)
  out:close()
  local p = io.popen("CF_DIR=" .. cf .. " node bench/describe/cloudflare.mjs --o200k " .. path ..
                     " 2>/dev/null")
  local n = p and tonumber(p:read("l") or "")
  if p then p:close() end
  os.remove(path)
  return n
end

describe("the description of the 13-tool fixture", function()
  local tools = F.load(FIXTURE)

  it("is within its token budget: 0.75 x Cloudflare's", function()
    local text = D.describe(tools, "full")
    local n, kind = o200k(text), "o200k"
    if not n then n, kind = T.count(text), "approx" end
    local budget = math.floor(RATIO * CLOUDFLARE[kind])
    assert.is_true(n <= budget, ("%d %s tokens, over the budget of %d"):format(n, kind, budget))
  end)

  it("writes the recursive filter once, by name", function()
    local text = D.describe(tools, "full")
    assert.truthy(text:find("\n filter?: filter\n", 1, true))
    assert.truthy(text:find('\n "and"?: filter[] #<=100\n "or"?: filter[] #<=100\n}', 1, true))
    assert.equal(1, select(2, text:gsub("\nfilter = {", "")))
  end)

  it("keeps every tool and the fields of each, required first", function()
    local text = D.describe(tools, "full")
    for _, t in ipairs(tools) do
      assert.truthy(text:find("\n" .. t.name .. "{", 1, true), t.name)
    end
    assert.truthy(text:find("github.create_issue{ -- Create an issue in a GitHub repository."
      .. "\n owner: string -- Account owner of the repository.\n repo: string", 1, true))
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
    -- additionalProperties: false is not written: validation (and the check before a run,
    -- for a literal table) names a field the schema does not have
    assert.falsy(text:find("no other fields", 1, true))
  end)

  it("is the same text each time", function()
    assert.equal(D.describe(tools, "full"), D.describe(F.load(FIXTURE), "full"))
  end)
end)

describe("the description run_lua sends (auto)", function()
  it("of 25 tools fits in 2,048 characters and names every tool", function()
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
    local text, mode = D.describe(tools, "auto")
    assert.is_true(D.text_len(text) <= 2048, #text .. " characters")
    for _, t in ipairs(tools) do
      local ns, name = t.name:match("^(.*)%.([^.]*)$")
      assert.truthy(text:find("\n" .. t.name .. "{", 1, true) or
                    text:find("\ntools." .. ns .. ": [^\n]*" .. name), t.name .. " in " .. mode)
    end
  end)
end)
