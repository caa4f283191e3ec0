-- The config's policy section (engine/host/policy.c, lua/policy.lua), through
-- `tidepool run --config`: each operator of the condition language, its type
-- strictness, missing paths, not/and/or over unknown clauses, globs, precedence, max_calls,
-- rate buckets that do not refill within a test, and load errors with the rule's index and
-- the column. (Buckets on a fake clock, scopes, and decisions are in
-- spec/c/test_policy_rules.c.) Fixture tools: spec/fixtures/tools_calls (fx.echo).
local dkjson = require "dkjson"

local H = require("spec.helper")
local shell_quote, write_temp = H.shell_quote, H.write_temp
local TOOLS = "spec/fixtures/tools_calls"

-- Runs script under a config (a Lua table, encoded) with the tools of a directory (the
-- fixtures when nil) and more options of tidepool run; returns the envelope (or nil),
-- stderr and the exit status.
local function run(config, script, tools, options)
  local cpath = write_temp(dkjson.encode(config))
  local spath = write_temp(script)
  local out, err, rc = H.cli("run --json --no-builtin-tools " .. (options or "")
    .. " --tools " .. (tools or TOOLS)
    .. " --config " .. shell_quote(cpath) .. " " .. shell_quote(spath))
  os.remove(cpath)
  os.remove(spath)
  return dkjson.decode(out), err, rc
end

-- Calls fx.echo with each of the argument tables (Lua source) under one rule
-- {tools = "fx.echo", effect = "allow", where = where}; returns "ok" or the error code
-- for each, in order.
local function verdicts(where, args_list, rule)
  rule = rule or {}
  rule.tools, rule.effect, rule.where = "fx.echo", "allow", where
  local calls = {}
  for i, a in ipairs(args_list) do
    calls[i] = "do local ok, e = pcall(tools.fx.echo, " .. a .. ") r[#r + 1] = ok and 'ok' "
      .. "or e.code end"
  end
  local env, err = run({ policy = { rules = { rule } } },
    "local r = {} " .. table.concat(calls, " ") .. " return r")
  assert(env and env.ok, err .. (env and dkjson.encode(env) or ""))
  return env.result
end

local OK, NO = "ok", "tool.denied"

describe("policy conditions", function()
  it("compare numbers with ==, ~=, !=, <, <=, >, >=, integers and reals alike", function()
    assert.same({ OK, NO, OK }, verdicts("amount <= 10000",
      { "{amount = 10000}", "{amount = 10000.5}", "{amount = -3}" }))
    assert.same({ NO, OK }, verdicts("amount < 10", { "{amount = 10}", "{amount = 9.99}" }))
    assert.same({ OK, NO }, verdicts("amount > 1.5", { "{amount = 2}", "{amount = 1.5}" }))
    assert.same({ OK, NO }, verdicts("amount >= 2", { "{amount = 2.0}", "{amount = 1}" }))
    assert.same({ OK, NO }, verdicts("n == 3", { "{n = 3.0}", "{n = 4}" }))
    assert.same({ OK, NO }, verdicts("n ~= 3", { "{n = 4}", "{n = 3}" }))
    assert.same({ OK, NO }, verdicts("n != 3", { "{n = 4}", "{n = 3}" }))
  end)

  it("compare strings bytewise, and booleans and null by equality", function()
    assert.same({ OK, NO }, verdicts("day >= '2026-01-01'", { "{day = '2026-03-01'}",
      "{day = '2025-12-31'}" }))
    assert.same({ OK, NO }, verdicts("name == \"x\"", { "{name = 'x'}", "{name = 'xx'}" }))
    assert.same({ OK, NO }, verdicts("draft == false", { "{draft = false}", "{draft = true}" }))
    assert.same({ OK, NO }, verdicts("v == null", { "{v = json.null}", "{v = 1}" }))
    assert.same({ OK, NO }, verdicts("v ~= null", { "{v = 'a'}", "{v = json.null}" }))
  end)

  it("are type-strict: a string never compares to a number, nor a boolean to either",
     function()
    assert.same({ NO, NO, NO, NO }, verdicts("amount <= 10000",
      { "{amount = '5'}", "{amount = true}", "{amount = {1}}", "{amount = {a = 1}}" }))
    assert.same({ NO, NO }, verdicts("code == '5'", { "{code = 5}", "{code = 5.0}" }))
    -- a mismatch is unknown, not false: ~= does not turn it into a yes
    assert.same({ NO }, verdicts("code ~= '5'", { "{code = 5}" }))
    assert.same({ NO }, verdicts("flag == true", { "{flag = 'true'}" }))
    assert.same({ NO }, verdicts("name < 'm'", { "{name = 5}" }))
  end)

  it("fail a clause whose path is missing, however it is negated", function()
    assert.same({ NO, NO }, verdicts("amount <= 10", { "{}", "{other = 1}" }))
    assert.same({ NO }, verdicts("not (amount > 10)", { "{}" }))
    assert.same({ NO }, verdicts("not draft", { "{}" }))
    -- exists never is unknown, so it guards optional arguments
    assert.same({ OK, OK, NO }, verdicts("not exists(draft) or draft == false",
      { "{}", "{draft = false}", "{draft = true}" }))
    assert.same({ OK, NO }, verdicts("exists(a) and a > 1 or not exists(a)",
      { "{}", "{a = 0}" }))
  end)

  it("follow paths into objects and arrays, arrays counted from 1", function()
    assert.same({ OK, NO, NO }, verdicts("items[1].sku == 'x'",
      { "{items = {{sku = 'x'}, {sku = 'y'}}}", "{items = {{sku = 'y'}, {sku = 'x'}}}",
        "{items = {}}" }))
    assert.same({ OK, NO }, verdicts("a.b.c == 1", { "{a = {b = {c = 1}}}", "{a = {b = 1}}" }))
    assert.same({ OK }, verdicts("m[\"odd key\"] == 2", { "{m = {['odd key'] = 2}}" }))
    assert.same({ OK, NO }, verdicts("m['2'] == 1", { "{m = {['2'] = 1}}", "{m = {1, 1}}" }))
  end)

  it("measure #path: characters of a string, items of an array, keys of an object",
     function()
    assert.same({ OK, NO, NO }, verdicts("#labels <= 2",
      { "{labels = {'a', 'b'}}", "{labels = {'a', 'b', 'c'}}", "{labels = 5}" }))
    assert.same({ OK, NO }, verdicts("#name == 3", { "{name = 'été'}", "{name = 'ete!'}" }))
    assert.same({ OK }, verdicts("#m == 2", { "{m = {a = 1, b = 2}}" }))
  end)

  it("test membership with in {...}, by value and type", function()
    assert.same({ OK, OK, NO, NO }, verdicts("currency in {'EUR', 'USD'}",
      { "{currency = 'EUR'}", "{currency = 'USD'}", "{currency = 'GBP'}", "{currency = 1}" }))
    assert.same({ OK, NO }, verdicts("n in {1, 2, 'three'}", { "{n = 2}", "{n = 'two'}" }))
  end)

  it("test strings with starts_with, ends_with, contains, as methods or infix", function()
    assert.same({ OK, NO, NO }, verdicts("repo:starts_with('acme/')",
      { "{repo = 'acme/web'}", "{repo = 'evil/acme/'}", "{repo = 7}" }))
    assert.same({ OK, NO }, verdicts("repo starts_with 'acme/'",
      { "{repo = 'acme/x'}", "{repo = 'acm'}" }))
    assert.same({ OK, NO }, verdicts("path:ends_with('.md')", { "{path = 'a.md'}",
      "{path = 'a.md.sh'}" }))
    assert.same({ OK, NO }, verdicts("title contains 'fix'", { "{title = 'a fix here'}",
      "{title = 'fi x'}" }))
  end)

  it("test arrays with contains, by value and type", function()
    assert.same({ OK, NO, NO }, verdicts("labels:contains('bug')",
      { "{labels = {'ui', 'bug'}}", "{labels = {'ui'}}", "{labels = {}}" }))
    assert.same({ OK, NO }, verdicts("ids contains 3", { "{ids = {1, 3}}", "{ids = {'3'}}" }))
  end)

  it("test existence with exists(path), path exists and path:exists()", function()
    assert.same({ OK, NO, OK }, verdicts("exists(a.b)", { "{a = {b = false}}", "{a = {}}",
      "{a = {b = json.null}}" }))
    assert.same({ OK, NO }, verdicts("a exists", { "{a = 1}", "{}" }))
    assert.same({ OK, NO }, verdicts("a:exists()", { "{a = 1}", "{}" }))
  end)

  it("read a bare path as a boolean", function()
    assert.same({ OK, NO, NO }, verdicts("confirmed", { "{confirmed = true}",
      "{confirmed = false}", "{confirmed = 1}" }))
  end)

  it("combine with and, or, not and parentheses, and binding tighter than or", function()
    local cases = { "{a = 1, b = 0, c = 0}", "{a = 0, b = 1, c = 1}", "{a = 0, b = 1, c = 0}" }
    assert.same({ OK, OK, NO }, verdicts("a == 1 or b == 1 and c == 1", cases))
    assert.same({ NO, OK, NO }, verdicts("(a == 1 or b == 1) and c == 1", cases))
    assert.same({ NO, OK, OK }, verdicts("not a == 1", cases))
    assert.same({ OK, NO, NO }, verdicts("not not (a == 1)", cases))
  end)

  it("match PCRE2 patterns when the rule has regex: true", function()
    assert.same({ OK, NO, NO }, verdicts("branch:matches('^feature/[a-z0-9-]+$')",
      { "{branch = 'feature/new-ui'}", "{branch = 'feature/Bad'}", "{branch = 3}" },
      { regex = true }))
  end)
end)

describe("policy rules", function()
  it("apply every matching rule: deny beats ask beats allow", function()
    local env = run({ policy = { rules = {
      { tools = "fx.**", effect = "allow" },
      { tools = "fx.echo", effect = "ask", where = "write", reason = "writes need a person" },
      { tools = "fx.*", effect = "deny", where = "secret == true", reason = "no secrets" },
    } } }, [[
      local r = {}
      for i, a in ipairs({ {write = false, secret = false}, {write = true, secret = false},
                           {write = true, secret = true}, {write = false, secret = true} }) do
        local ok, e = pcall(tools.fx.echo, a)
        r[i] = ok and "ok" or e.message
      end
      return r
    ]], nil, "--approve none")
    assert.same({
      "ok",
      "tools.fx.echo was denied by the host's policy: writes need a person (policy rule 1); "
        .. "this run declines every call that needs a person's approval (--approve none)",
      "tools.fx.echo was denied by the host's policy: no secrets (policy rule 2 denies it when "
        .. "`secret == true`, and that holds)",
      "tools.fx.echo was denied by the host's policy: no secrets (policy rule 2 denies it when "
        .. "`secret == true`, and that holds)",
    }, env.result)
  end)

  it("fail closed: a deny rule whose condition cannot be checked applies", function()
    local env = run({ policy = { default = "allow", rules = {
      { tools = "fx.echo", effect = "deny", where = "amount > 100" },
      { tools = "fx.echo_value", effect = "deny", where = "exists(v.amount) and v.amount > 100" },
    } } }, [[
      local ok, e = pcall(tools.fx.echo, {})
      return {e.message, pcall(tools.fx.echo_value, {v = {}})}
    ]])
    assert.same({ "tools.fx.echo was denied by the host's policy: policy rule 0 denies it when "
      .. "`amount > 100`, and `amount > 100` cannot be checked: amount is missing",
      true, {} }, env.result)
  end)

  it("deny what no rule allows, unless the default is allow", function()
    local script = "return {pcall(tools.fx.echo, {})}"
    local env = run({ policy = { rules = { { tools = "weather.*", effect = "allow" } } } },
      script)
    assert.equal("tool.denied", env.result[2].code)
    env = run({ policy = { default = "allow", rules = {} } }, script)
    assert.same({ true, {} }, env.result)
  end)

  it("count max_calls per run, over every tool the rule covers", function()
    local env = run({ policy = { rules = { { tools = "fx.echo*", effect = "allow",
      max_calls = 2 } } } }, [[
      local a = pcall(tools.fx.echo, {})
      local b = pcall(tools.fx.echo_value, {v = 1})
      local ok, e = pcall(tools.fx.echo, {})
      return {a, b, e.message}
    ]])
    assert.same({ true, true, "tools.fx.echo was denied by the host's policy: policy rule 0 "
      .. "allows 2 calls of fx.echo* per run, and this run has made them all" }, env.result)
  end)

  it("rate-limit with a token bucket: tool.rate_limited with retry_after_ms", function()
    local env = run({ policy = { rules = { { tools = "fx.echo", effect = "allow",
      rate = { capacity = 2, per_second = 0.5, key = "global" } } } } }, [[
      local r = {}
      for i = 1, 3 do
        local ok, e = pcall(tools.fx.echo, {})
        r[i] = ok and "ok" or {e.code, e.retry_after_ms}
      end
      return r
    ]])
    -- a bucket of 2 regains one call every 2 s: the third call waits about 2000 ms
    assert.equal("ok", env.result[1])
    assert.equal("ok", env.result[2])
    assert.equal("tool.rate_limited", env.result[3][1])
    assert.is_true(env.result[3][2] > 1500 and env.result[3][2] <= 2000, env.result[3][2])
    assert.equal("tool.rate_limited", env.calls[3].error)
  end)
end)

describe("examples/policy.json", function()
  it("allows, denies, asks and rate-limits as docs/policy.md says", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. shell_quote(dir)))
    local f = assert(io.open(dir .. "/example.lua", "wb"))
    f:write([[
      local function echo(args) return args end
      return {
        { name = "payments.send", description = "x", handler = echo },
        { name = "payments.refund", description = "x", handler = echo },
        { name = "github.repos.get", description = "x", handler = echo },
        { name = "github.issues.create", description = "x", handler = echo },
      }
    ]])
    f:close()
    f = assert(io.open("examples/policy.json", "rb"))
    local config = f:read("a")
    f:close()
    local script = [[
      local function try(f, args)
        local ok, e = pcall(f, args)
        return ok and "ok" or e.code
      end
      local r = {
        try(tools.payments.send, {amount = 100, currency = "EUR"}),
        try(tools.payments.send, {amount = 20000, currency = "EUR"}),
        try(tools.payments.refund, {id = 1}),
        try(tools.github.repos.get, {repo = "acme/web"}),
        try(tools.github.repos.get, {repo = "other/web"}),
        try(tools.github.issues.create, {repo = "acme/web"}),
        try(tools.github.repos.get, {repo = "acme/web", force = true}),
      }
      for i = 1, 5 do r[#r + 1] = try(tools.payments.send, {amount = 1, currency = "USD"}) end
      return r
    ]]
    local env, err = run(dkjson.decode(config), script, dir,
      "--principal alice --scopes 'payments:write,github:read'")
    assert(env and env.ok, err)
    -- a bucket of 5 a session: the first payment and four more, then the limit
    assert.same({ "ok", "tool.denied", "ok", "ok", "tool.denied", "tool.denied",
      "tool.denied", "ok", "ok", "ok", "ok", "tool.rate_limited" }, env.result)
    -- without the scope, payments.* denies every payment, whatever its amount
    env = run(dkjson.decode(config), script, dir)
    assert.equal("tool.denied", env.result[1])
    assert.equal("tool.denied", env.result[3])
    assert.equal("ok", env.result[4])
    os.execute("rm -rf " .. shell_quote(dir))
  end)
end)

describe("policy load errors", function()
  local function load_error(rules)
    local env, err, rc = run({ policy = { rules = rules } }, "return 1")
    assert.is_nil(env)
    assert.equal(2, rc)
    return (err:gsub("^tidepool: [^:]*: ", "config: "):gsub("\n$", ""))
  end

  it("name the rule's index and the column of a syntax error", function()
    assert.equal("config: policy.rules[1].where: column 15: expected a value after '<='",
      load_error({ { tools = "a", effect = "allow" },
                   { tools = "b", effect = "allow", where = "x > 1 and y <=" } }))
    assert.equal("config: policy.rules[0].where: column 8: expected 'and', 'or' or the end "
      .. "of the condition", load_error({ { tools = "a", effect = "allow", where = "amount 5" } }))
    assert.equal("config: policy.rules[0].where: column 3: unknown test 'has': use "
      .. "starts_with, ends_with, contains, matches or exists",
      load_error({ { tools = "a", effect = "allow", where = "x:has('a')" } }))
    assert.equal("config: policy.rules[0].where: column 7: an index counts from 1, as in "
      .. "Lua: items[1] is the first item",
      load_error({ { tools = "a", effect = "allow", where = "items[0] == 1" } }))
    assert.equal("config: policy.rules[0].where: column 5: '<' compares numbers or strings, "
      .. "not true", load_error({ { tools = "a", effect = "allow", where = "x < true" } }))
    assert.equal("config: policy.rules[0].where: column 16: starts_with takes a string, not 5",
      load_error({ { tools = "a", effect = "allow", where = "x:starts_with( 5)" } }))
  end)

  it("name the field of a rule that is not as the schema says", function()
    -- the config file's schema finds these, before the policy's own loader
    assert.equal("config: /policy/rules/0/max_calls: expected at least 0, got -1",
      load_error({ { tools = "a", effect = "allow", max_calls = -1 } }))
    assert.equal("config: /policy/rules/0/requires/1: expected a string, got an integer (5)",
      load_error({ { tools = "a", effect = "allow", requires = { "a", 5 } } }))
    assert.equal("config: /policy/rules/0: missing \"tools\" (A glob over dotted tool names: * "
      .. "matches one part (or, inside a part, any run of characters but a dot: \"fs.read*\"), "
      .. "** any number of parts, none included (\"github.**\" matches github and everything "
      .. "under it).)", load_error({ { effect = "allow" } }))
  end)
end)
