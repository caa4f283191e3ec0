-- build/tidepool, driven as a process: output, exit status, options, usage errors.
local dkjson = require "dkjson"

local H = require("spec.helper")
local BIN, shell_quote, write_temp, sh = H.BIN, H.shell_quote, H.write_temp, H.sh
local run = H.run_script  -- tidepool run ARGS on a script given as text

-- --json output: exactly one line, parsed.
local function run_json(script, args)
  local out, err, rc = run(script, "--json " .. (args or ""))
  assert.are.equal(1, select(2, out:gsub("\n", "\n")), "not one line: " .. out)
  local env = dkjson.decode(out)
  assert.is_table(env, "not JSON: " .. out)
  return env, rc, err
end

describe("tidepool run", function()
  it("--json prints exactly one line that parses as the envelope, exit 0", function()
    local env, rc, err = run_json("print('hi') return { a = 1, b = { 1, 2 } }")
    assert.are.equal(0, rc)
    assert.are.equal("", err)
    assert.is_true(env.ok)
    assert.are.same({ a = 1, b = { 1, 2 } }, env.result)
    assert.are.same({ "hi" }, env.logs)
    assert.is_number(env.stats.wall_ms)
  end)

  it("--json on a failing script prints the error envelope, exit 1", function()
    local env, rc = run_json("local x = nil\nreturn x.y")
    assert.are.equal(1, rc)
    assert.is_false(env.ok)
    assert.are.equal("runtime", env.error.code)
    assert.are.equal(2, env.error.line)
  end)

  it("--json with logs that hold newlines and invalid UTF-8 is still one line", function()
    local env, rc = run_json("print('a\\nb\\255') return 'x\\ny'")
    assert.are.equal(0, rc)
    assert.are.same({ "a\nb\239\191\189" }, env.logs)
    assert.are.equal("x\ny", env.result)
  end)

  it("without --json prints logs and the result for a person", function()
    local out, err, rc = run("print('hello') return { n = 1 }")
    assert.are.equal(0, rc)
    assert.are.equal("", err)
    assert.are.equal('hello\n{\n  "n": 1\n}\n', out)
  end)

  it("without --json prints numbers as --json does: the shortest text that reads back", function()
    local script = "return { a = 4.828032, b = { 0.1 + 0.2, 3.0, 1e21, -0.0, 5e-324 }, c = 7 }"
    local out, _, rc = run(script)
    assert.are.equal(0, rc)
    assert.are.equal('{\n  "a": 4.828032,\n  "b": [\n    0.30000000000000004,\n    3.0,\n'
      .. '    1e+21,\n    -0.0,\n    5e-324\n  ],\n  "c": 7\n}\n', out)
    local jout = run(script, "--json")
    assert.truthy(jout:find('"result":{"a":4.828032,"b":[0.30000000000000004,3.0,1e+21,'
      .. '-0.0,5e-324],"c":7}', 1, true))
  end)

  it("without --json prints a string result as is", function()
    local out, _, rc = run("return 'plain'")
    assert.are.equal(0, rc)
    assert.are.equal("plain\n", out)
  end)

  it("without --json an error goes to stderr with its code, line and hint, exit 1", function()
    local out, err, rc = run("print('before')\nerror('boom')")
    assert.are.equal(1, rc)
    assert.are.equal("before\n", out)
    assert.truthy(err:find("error [runtime] at line 2: boom", 1, true))
    assert.truthy(err:find("2 | error('boom')", 1, true))
  end)

  it("a syntax error exits 1", function()
    local env, rc = run_json("return = 1")
    assert.are.equal(1, rc)
    assert.are.equal("syntax", env.error.code)
  end)

  it("reads the script from standard input with -", function()
    local out, _, rc = sh(BIN .. " run --json -", "return 6 * 7")
    assert.are.equal(0, rc)
    assert.are.equal(42, dkjson.decode(out).result)
  end)

  it("reads a fenced script from standard input", function()
    local out, _, rc = sh(BIN .. " run --json -", "Here:\n```lua\nreturn 'fenced'\n```\n")
    assert.are.equal(0, rc)
    assert.are.equal("fenced", dkjson.decode(out).result)
  end)

  it("--for-model: 100 kv.set and 100 kv.get returning 5050 is one line of 71 bytes", function()
    local out, err, rc = run([[
for i = 1, 100 do tools.kv.set{key = "k" .. i, value = i} end
local s = 0
for i = 1, 100 do s = s + tools.kv.get{key = "k" .. i}.value end
return s]], "--for-model")
    assert.are.equal(0, rc)
    assert.are.equal("", err)
    assert.are.equal('{"calls":{"kv.get":100,"kv.set":100},"logs":[],"ok":true,'
      .. '"result":5050}\n', out)
    assert.are.equal(72, #out)  -- 71 bytes and the newline; --json prints over 7,000
  end)

  it("--for-model lists each failed call in full, the others only counted", function()
    local out, _, rc = run([[
local ok, e = pcall(tools.kv.get, {nokey = 1})
tools.kv.set{key = "x", value = 1}
return tools.kv.get{key = {}}]], "--for-model")
    assert.are.equal(1, rc)
    local v = dkjson.decode(out)
    assert.are.same({ ["kv.get"] = 2, ["kv.set"] = 1 }, v.calls)
    assert.are.same({
      { tool = "kv.get", line = 1, code = "tool.invalid_input", message = 'tools.kv.get: '
        .. 'invalid arguments: $: missing required property "key"; $.nokey: unexpected '
        .. 'property "nokey" (allowed: "key") (tools.describe("kv.get") shows what it takes)' },
    }, v.failed_calls)  -- the call on line 3 ended the run: it is the error, once
    assert.are.equal("tool.invalid_input", v.error.code)
    assert.are.equal(3, v.error.line)
    assert.are.equal('tools.kv.get: invalid arguments: $.key: expected string, got object '
      .. '(tools.describe("kv.get") shows what it takes)', v.error.message)
    assert.is_nil(v.stats)
    assert.is_nil(v.failed_unlisted)
  end)

  it("--for-model lists a failure repeated in a loop once, with how many times", function()
    local out, _, rc = run([[
for i = 1, 50 do pcall(tools.kv.get, {}) end
pcall(tools.kv.get, {})
return 1]], "--for-model")
    assert.are.equal(0, rc)
    local v = dkjson.decode(out)
    local msg = 'tools.kv.get: invalid arguments: $: missing required property "key" '
      .. '(tools.describe("kv.get") shows what it takes)'
    assert.are.same({
      { tool = "kv.get", line = 1, code = "tool.invalid_input", message = msg, times = 50 },
      { tool = "kv.get", line = 2, code = "tool.invalid_input", message = msg },
    }, v.failed_calls)
    assert.are.same({ ["kv.get"] = 51 }, v.calls)
  end)

  it("--for-model keeps the count of a failure that ended the run, not its message", function()
    local out, _, rc = run([[
for i = 1, 3 do pcall(tools.kv.get, {}) end
local function get(a) return tools.kv.get(a) end
for i = 1, 3 do pcall(get, {}) end
return get({})]], "--for-model")
    assert.are.equal(1, rc)
    local v = dkjson.decode(out)
    local msg = 'tools.kv.get: invalid arguments: $: missing required property "key" '
      .. '(tools.describe("kv.get") shows what it takes)'
    assert.are.same({ code = "tool.invalid_input", line = 2, message = msg }, {
      code = v.error.code, line = v.error.line, message = v.error.message })
    assert.are.same({
      { tool = "kv.get", line = 1, code = "tool.invalid_input", message = msg, times = 3 },
      { tool = "kv.get", line = 2, code = "tool.invalid_input", times = 3, same_as_error = true },
    }, v.failed_calls)
    local n = select(2, out:gsub('missing required property', ''))
    assert.are.equal(2, n)  -- once for line 1, once in the error
  end)

  it("--for-model counts the calls past the first 100 and the failures among them", function()
    local out, _, rc = run([[
for i = 1, 150 do tools.kv.set{key = "k" .. i, value = i} end
for i = 1, 3 do pcall(tools.kv.get, {}) end
return 1]], "--for-model")
    assert.are.equal(0, rc)
    local v = dkjson.decode(out)
    assert.are.same({ ["kv.set"] = 150, ["kv.get"] = 3 }, v.calls)
    assert.is_nil(v.failed_calls)
    assert.are.equal(3, v.failed_unlisted)
  end)
end)

describe("tidepool run options", function()
  local hog = "local t = {} for i = 1, 1e6 do t[i] = i end return #t"

  it("--memory 512K stops a script that fits the default", function()
    assert.are.equal(0, select(2, run_json(hog)))
    local env, rc = run_json(hog, "--memory 512K")
    assert.are.equal(1, rc)
    assert.are.equal("limit.memory", env.error.code)
    assert.are.equal("the script used more than its memory limit of 512 KiB", env.error.message)
  end)

  it("--memory=SIZE works too", function()
    local env = run_json(hog, "--memory=1M")
    assert.are.equal("limit.memory", env.error.code)
  end)

  it("--timeout 200ms stops an endless loop with limit.time", function()
    local env, rc = run_json("while true do end", "--timeout 200ms")
    assert.are.equal(1, rc)
    assert.are.equal("limit.time", env.error.code)
    assert.are.equal("the script ran longer than its time limit of 200 ms", env.error.message)
  end)

  it("--cpu 100ms stops an endless loop with limit.cpu", function()
    local env = run_json("while true do end", "--cpu 100ms")
    assert.are.equal("limit.cpu", env.error.code)
    assert.are.equal("the script used more than its CPU time limit of 100 ms", env.error.message)
  end)

  it("--instructions stops a loop and reports the count", function()
    local env = run_json("while true do end", "--instructions 5000")
    assert.are.equal("limit.instructions", env.error.code)
    assert.are.equal(5001, env.stats.instructions)
  end)

  it("--max-output cuts a print flood", function()
    local env = run_json("for i = 1, 100 do print(('x'):rep(50)) end", "--max-output 200")
    assert.are.equal("limit.output", env.error.code)
    assert.are.equal("...[output truncated: the 200-byte output limit was reached]",
      env.logs[#env.logs])
  end)

  it("--max-result refuses a large result", function()
    local env = run_json("return ('x'):rep(500)", "--max-result 100")
    assert.are.equal("limit.result", env.error.code)
  end)

  it("--max-source refuses a long script", function()
    local env = run_json("return 1 -- a comment that makes it long", "--max-source 10")
    assert.are.equal("limit.source", env.error.code)
  end)
end)

describe("tidepool plugins", function()
  local function tempdir()
    local p = assert(io.popen("mktemp -d"))
    local d = p:read("l")
    p:close()
    return d
  end

  it("a tool named search, list.all, x.list or describe loads and is called with a table; "
     .. "tools.search(\"words\"), tools.list() and tools.describe(name) stay discovery", function()
    local dir = tempdir()
    local f = assert(io.open(dir .. "/d.lua", "w"))
    f:write([[
local function t(name)
  return { name = name, description = name .. ".",
           handler = function() return { tool = name } end }
end
return { t("search"), t("list.all"), t("x.list"), t("describe") }
]])
    f:close()
    local env, rc, err = run_json([[
return { tools.search{q = "a"}.tool, tools.list.all{}.tool, tools.x.list{}.tool,
  tools.describe{}.tool, #tools.list(), type(tools.search("all")),
  tools.describe("x.list"):find("x.list", 1, true) ~= nil }]],
      "--strict --no-builtin-tools --tools " .. dir)
    os.execute("rm -rf " .. shell_quote(dir))
    assert.are.equal("", err)
    assert.are.equal(0, rc)
    assert.are.same({ "search", "list.all", "x.list", "describe", 4, "table", true }, env.result)
  end)

  it("without a tool named search, tools.search{...} is discovery's argument error", function()
    local env, rc = run_json("return tools.search{q = 1}", "--no-builtin-tools")
    assert.are.equal(1, rc)
    assert.are.equal("bad argument #1 to 'search' (string expected, got table)", env.error.message)
  end)

  it("--strict: a refused plugin exits 3 before the script runs; without it, a warning", function()
    local out, err, rc = run("print('ran') return 1",
                             "--strict --no-builtin-tools --tools spec/fixtures/plugins/broken")
    assert.are.equal(3, rc)
    assert.are.equal("", out)
    local _, n = err:gsub("tidepool: spec/fixtures/plugins/broken/", "")
    assert.are.equal(9, n)
    assert.are.equal(0, select(2, err:gsub("warning", "")))
    assert.are.equal("tidepool: --strict: refused: 9 plugin problems (above)",
                     err:match("([^\n]*)\n$"))
    out, _, rc = run("return tools.ok.one ~= nil",
                     "--no-builtin-tools --tools spec/fixtures/plugins/broken")
    assert.are.equal(0, rc)
    assert.are.equal("true\n", out)
    _, _, rc = run("return 1", "--strict --no-builtin-tools --tools spec/fixtures/plugins/good")
    assert.are.equal(0, rc)
  end)

  it("--strict applies to describe too", function()
    local _, _, rc = sh(BIN .. " describe --strict --no-builtin-tools --tools "
                        .. "spec/fixtures/plugins/broken")
    assert.are.equal(3, rc)
  end)
end)

describe("tidepool usage errors", function()
  local function usage(args, needle, stdin)
    local out, err, rc = sh(BIN .. " " .. args, stdin)
    assert.are.equal(2, rc, args)
    assert.are.equal("", out)
    assert.truthy(err:find(needle, 1, true), err)
  end

  it("an unknown option exits 2 with a message", function()
    usage("run --bogus x.lua", "tidepool: unknown option '--bogus'")
  end)

  it("a bad size exits 2 with a message", function()
    usage("run --memory 12Q -",
          "tidepool: --memory: bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)", "return 1")
  end)

  it("a bad duration exits 2 with a message", function()
    usage("run --timeout soon -", "tidepool: --timeout: bad duration 'soon'", "return 1")
  end)

  it("a bad instruction count exits 2", function()
    usage("run --instructions -5 -", "tidepool: --instructions: bad instruction count '-5'",
          "return 1")
  end)

  it("an option without its value exits 2", function()
    usage("run --memory", "tidepool: option '--memory' needs a value")
  end)

  it("a missing file exits 2 with a message", function()
    usage("run /nonexistent/script.lua",
      "tidepool: cannot open '/nonexistent/script.lua': No such file or directory")
  end)

  it("no file exits 2", function()
    usage("run --json", "no FILE given")
  end)

  it("an unknown command exits 2", function()
    usage("frobnicate", "tidepool: unknown command 'frobnicate'")
  end)

  it("no arguments at all exits 2 with the usage text", function()
    usage("", "usage: tidepool run")
  end)
end)

describe("tidepool check", function()
  it("a good script compiles without running, exit 0", function()
    local path = write_temp("print('ran') return 1")
    local out, _, rc = sh(BIN .. " check --json " .. shell_quote(path))
    os.remove(path)
    assert.are.equal(0, rc)
    local env = dkjson.decode(out, 1, dkjson.null)
    assert.is_true(env.ok)
    assert.are.equal(dkjson.null, env.result)
    assert.are.same({}, env.logs)
  end)

  it("a bad script reports the syntax error, exit 1", function()
    local out, _, rc = sh(BIN .. " check --json -", "local x = 1\nlocal = 2\n")
    assert.are.equal(1, rc)
    local env = dkjson.decode(out)
    assert.is_false(env.ok)
    assert.are.equal("syntax", env.error.code)
    assert.are.equal(2, env.error.line)
    assert.are.equal("local = 2", env.error.source)
  end)

  it("a script that would loop for ever is only compiled", function()
    local out, _, rc = sh(BIN .. " check --json -", "while true do end")
    assert.are.equal(0, rc)
    assert.is_true(dkjson.decode(out).ok)
  end)
end)

describe("tidepool --version and --help", function()
  it("--version prints the version, exit 0", function()
    local out, _, rc = sh(BIN .. " --version")
    assert.are.equal(0, rc)
    assert.truthy(out:match("^tidepool %d+%.%d+%.%d+"))
  end)

  it("--help prints the usage and every option, exit 0", function()
    local out, _, rc = sh(BIN .. " --help")
    assert.are.equal(0, rc)
    for _, opt in ipairs{ "--json", "--memory", "--instructions", "--cpu", "--timeout",
                          "--max-output", "--max-result", "--max-source" } do
      assert.truthy(out:find(opt, 1, true), opt)
    end
  end)

  it("run --help prints the usage, exit 0", function()
    local out, _, rc = sh(BIN .. " run --help")
    assert.are.equal(0, rc)
    assert.truthy(out:find("usage: tidepool run", 1, true))
  end)
end)
