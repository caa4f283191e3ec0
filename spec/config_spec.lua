-- The config file (--config FILE, tidepool config check, the Lua module's config option):
-- exact messages with JSON paths and exit statuses, unknown sections, bad limit values,
-- options winning over the file, relative paths starting at the file's folder, and
-- malformed inputs that end in a clear error.
local dkjson = require "dkjson"

local H = require("spec.helper")
local ROOT, ABSBIN = H.ROOT, H.ABS_BIN
local q, write, read, sh = H.q, H.write, H.read, H.sh

-- A fresh directory: DIR/conf/{plugins,more,data,ws2} with a plugin in plugins and more.
local function tree()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. q(dir) .. "/conf/plugins " .. q(dir) .. "/conf/more " ..
                    q(dir) .. "/conf/data " .. q(dir) .. "/conf/ws2"))
  write(dir .. "/conf/plugins/hello.lua",
    "return { name = 'hello.say', description = 'says hi',\n" ..
    "         handler = function() return 'hi' end }\n")
  write(dir .. "/conf/more/bye.lua",
    "return { name = 'bye.say', description = 'says bye',\n" ..
    "         handler = function() return 'bye' end }\n")
  return dir
end

local function rmtree(dir)
  os.execute("rm -rf " .. q(dir))
end

local GOOD = [[
{"limits": {"memory": "32M", "timeout": 0.5, "tool_calls": 50},
 "tools": ["plugins"],
 "workspace": {"dir": "data", "max": "10M"},
 "mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"],
                           "disabled": true},
                "web": {"url": "http://127.0.0.1:3000/mcp", "type": "http", "disabled": true}},
 "http": {"allow": ["api.github.com", {"host": "x.com", "methods": ["GET"]}]},
 "commands": [{"argv0": "git", "sub": ["status"]}],
 "policy": {"default": "allow"}}
]]

local SECTIONS = "limits, tools, workspace, mcpServers, http, commands, policy, " ..
  "tool_settings, state, server, telemetry, auth"

describe("tidepool config check", function()
  local dir
  before_each(function() dir = tree() end)
  after_each(function() rmtree(dir) end)

  it("prints FILE: ok and a one-line summary, exit 0", function()
    local file = dir .. "/conf/tidepool.json"
    write(file, GOOD)
    local out, err, rc = sh(q(ABSBIN) .. " config check " .. q(file))
    assert.are.equal("", err)
    assert.are.equal(file .. ": ok: 7 sections (limits, tools, workspace, mcpServers, " ..
                     "http, commands, policy), 2 MCP servers, " ..
                     "1 command, 2 http allow rules, 1 plugin directory\n", out)
    assert.are.equal(0, rc)
  end)

  it("prints every problem with its JSON path, not only the first, and exits 2", function()
    local file = dir .. "/conf/bad.json"
    write(file, [[
{"limits": {"memory": "12Q", "wall": 3},
 "tools": "plugins",
 "mcpServers": {"memory": {"command": "npx", "args": "-y"}},
 "commands": [{"sub": ["x"]}],
 "polcy": {}}
]])
    local out, err, rc = sh("cd / && " .. q(ABSBIN) .. " config check " .. q(file))
    assert.are.equal("", out)
    assert.are.equal(table.concat({
      file .. ": /commands/0: missing \"argv0\" (the program, resolved in PATH when " ..
        "tidepool starts); for example \"argv0\": \"git\"",
      file .. ": /limits/memory: bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)",
      file .. ": /limits/wall: unknown limit \"wall\" (did you mean \"timeout\"?); the " ..
        "limits are: memory, instructions, cpu, timeout, max_output, max_source, " ..
        "max_result, tool_calls, tool_calls_per_tool, tool_in_flight, tool_bytes, " ..
        "tool_timeout, fs_quota",
      file .. ": /mcpServers/memory/args: expected an array of strings, got a string; " ..
        "for example \"args\": [\"-y\",\"@modelcontextprotocol/server-memory\"]",
      file .. ": /polcy: unknown section \"polcy\" (did you mean \"policy\"?); the " ..
        "sections are: " .. SECTIONS,
      file .. ": /tools: expected an array of strings, got a string; for example " ..
        "\"tools\": [\"plugins\"]",
    }, "\n") .. "\n", err)
    assert.are.equal(2, rc)
  end)

  it("checks each file given: one bad file makes the status 2", function()
    local good, bad = dir .. "/conf/good.json", dir .. "/conf/bad.json"
    write(good, '{"tools": ["plugins"]}')
    write(bad, '{"secrets": {}}')
    local out, err, rc = sh(q(ABSBIN) .. " config check " .. q(good) .. " " .. q(bad))
    assert.are.equal(good .. ": ok: 1 section (tools), 0 MCP servers, 0 commands, " ..
                     "0 http allow rules, 1 plugin directory\n", out)
    assert.are.equal(bad .. ": /secrets: unknown section \"secrets\"; the sections are: " ..
                     SECTIONS .. "\n", err)
    assert.are.equal(2, rc)
  end)

  it("resolves relative paths against the file's folder, not the current directory", function()
    local file = dir .. "/conf/rel.json"
    write(file, '{"tools": ["conf/plugins"], "workspace": "data"}')
    local out, err, rc = sh("cd " .. q(dir) .. " && " .. q(ABSBIN) .. " config check conf/rel.json")
    assert.are.equal("", out)
    assert.are.equal("conf/rel.json: /tools/0: \"conf/plugins\" is not a directory (looked " ..
                     "for " .. dir .. "/conf/conf/plugins; relative paths are relative to " ..
                     "the config file's folder)\n", err)
    assert.are.equal(2, rc)
  end)

  it("malformed, empty, huge and deeply nested files end in a clear error, exit 2", function()
    local cases = {
      { "", "not valid JSON: unexpected token near end of file at line 1 column 0" },
      { "{\"limits\": {\"memory\": 1,}}", "not valid JSON: " },
      { "[]", "expected a JSON object of sections at the top, got an array" },
      { "\0\1\2garbage", "not valid JSON: " },
      { "{\"policy\": " .. ("["):rep(100) .. ("]"):rep(100) .. "}",
        "/policy" .. ("/0"):rep(63) .. ": nested too deeply (more than 64 levels)" },
      { ("["):rep(100000), "not valid JSON: " },
      { "{\"policy\": \"" .. ("x"):rep(17 * 1024 * 1024) .. "\"}",
        "not valid JSON: input is 17825806 bytes, over the 16777216-byte cap" },
    }
    for i, c in ipairs(cases) do
      local file = dir .. "/conf/m" .. i .. ".json"
      write(file, c[1])
      local out, err, rc = sh(q(ABSBIN) .. " config check " .. q(file))
      assert.are.equal("", out)
      assert.are.equal(2, rc, "case " .. i .. ": " .. err)
      assert.is_truthy(err:find(file .. ": " .. c[2], 1, true), "case " .. i .. ": " .. err)
      assert.are.equal(1, select(2, err:gsub("\n", "")), "case " .. i .. ": " .. err)
    end
  end)

  it("a file that cannot be read, or no file, is a usage error", function()
    local out, err, rc = sh(q(ABSBIN) .. " config check " .. q(dir .. "/none.json"))
    assert.are.same({ "", "tidepool: " .. dir .. "/none.json: cannot read: No such file or " ..
                      "directory\n", 2 }, { out, err, rc })
    out, err, rc = sh(q(ABSBIN) .. " config check")
    assert.are.same({ "", "tidepool: config check needs a FILE\nTry 'tidepool --help'.\n", 2 },
                    { out, err, rc })
    out, err, rc = sh(q(ABSBIN) .. " config lint x")
    assert.are.same({ "", "tidepool: unknown config command (use: config check FILE... or " ..
                      "config schema)\nTry 'tidepool --help'.\n", 2 }, { out, err, rc })
  end)

  it("config schema prints the committed schema, byte for byte", function()
    local out, err, rc = sh(q(ABSBIN) .. " config schema")
    assert.are.same({ read(ROOT .. "/engine/host/config.schema.json"), "", 0 }, { out, err, rc })
  end)
end)

describe("tidepool run|check|describe --config", function()
  local dir, file
  before_each(function()
    dir = tree()
    file = dir .. "/conf/tidepool.json"
    write(file, GOOD)
    write(dir .. "/loop.lua", "while true do end")
    write(dir .. "/hello.lua", "return tools.hello.say{} .. ' ' .. tools.bye.say{}")
  end)
  after_each(function() rmtree(dir) end)

  local function run(args, script)
    return sh("cd / && " .. q(ABSBIN) .. " run --json " .. args .. " " .. q(dir .. "/" .. script))
  end

  it("a bad file exits 2 with each problem as FILE: /path: what, and runs nothing", function()
    write(file, '{"polcy": {}, "limits": {"timeout": "soon"}}')
    local out, err, rc = run("--config " .. q(file), "hello.lua")
    assert.are.equal("", out)
    assert.are.equal("tidepool: " .. file .. ": /limits/timeout: bad duration 'soon' (use " ..
                     "500ms, 2s, 1m)\n" ..
                     "tidepool: " .. file .. ": /polcy: unknown section \"polcy\" (did you " ..
                     "mean \"policy\"?); the sections are: " .. SECTIONS .. "\n", err)
    assert.are.equal(2, rc)
    out, err, rc = sh(q(ABSBIN) .. " describe --config " .. q(dir .. "/nope.json"))
    assert.are.same({ "", "tidepool: " .. dir .. "/nope.json: cannot read: No such file or " ..
                      "directory\n", 2 }, { out, err, rc })
  end)

  it("the file's limits apply, and a limit option wins over the file's", function()
    local out, _, rc = run("--config " .. q(file), "loop.lua")
    local env = dkjson.decode(out)
    assert.are.equal(1, rc)
    assert.are.equal("limit.time", env.error.code)
    assert.are.equal("the script ran longer than its time limit of 500 ms", env.error.message)
    out, _, rc = run("--timeout 700ms --config " .. q(file), "loop.lua")
    env = dkjson.decode(out)
    assert.are.equal(1, rc)
    assert.are.equal("the script ran longer than its time limit of 700 ms", env.error.message)
    -- --memory below the floor still refused when the file gives a good one
    out, _, rc = run("--config " .. q(file) .. " --memory 1K", "loop.lua")
    assert.are.same({ "", 2 }, { out, rc })
  end)

  it("loads the file's plugin directories relative to its folder; --tools adds to them", function()
    local out, err, rc = run("--config " .. q(file) .. " --tools " .. q(dir .. "/conf/more"),
                             "hello.lua")
    assert.are.equal("", err)
    assert.are.equal(0, rc)
    assert.are.equal("hi bye", dkjson.decode(out).result)
    out, err, rc = run("--config " .. q(file), "hello.lua")
    assert.are.equal("", err)
    assert.are.equal(1, rc)
    assert.are.equal("tool.unknown", dkjson.decode(out).error.code)
    out = sh("cd / && " .. q(ABSBIN) .. " describe --no-builtin-tools --config " .. q(file))
    assert.is_truthy(out:find("\nhello.say{} -- says hi\n", 1, true), out)
  end)

  it("the file's workspace serves the fs tools; --workspace wins over it", function()
    write(dir .. "/w.lua", "return tools.fs.write{path = 'a.txt', content = 'x'}.bytes")
    local out, err, rc = run("--config " .. q(file), "w.lua")
    assert.are.same({ 1, "", 0 }, { dkjson.decode(out).result, err, rc })
    assert.are.equal("x", read(dir .. "/conf/data/a.txt"))
    write(dir .. "/w.lua", "return tools.fs.write{path = 'b.txt', content = 'y'}.bytes")
    out, err, rc = run("--workspace " .. q(dir .. "/conf/ws2") .. " --config " .. q(file), "w.lua")
    assert.are.same({ 1, "", 0 }, { dkjson.decode(out).result, err, rc })
    assert.are.equal("y", read(dir .. "/conf/ws2/b.txt"))
    assert.is_nil(io.open(dir .. "/conf/data/b.txt"))
  end)

  it("the file's workspace max caps the fs tools; --workspace-max wins over it", function()
    write(file, '{"workspace": {"dir": "data", "max": "4K"}}')
    write(dir .. "/w.lua", "return tools.fs.write{path = 'big', content = ('x'):rep(8192)}.bytes")
    local out, _, rc = run("--config " .. q(file), "w.lua")
    assert.are.equal(1, rc)
    local env = dkjson.decode(out)
    assert.are.equal("tool.denied", env.error.code)
    assert.is_truthy(env.error.message:find("the workspace's growth cap is 4 KiB", 1, true),
                     env.error.message)
    out, _, rc = run("--workspace-max 1M --config " .. q(file), "w.lua")
    assert.are.same({ 8192, 0 }, { dkjson.decode(out).result, rc })
  end)
end)

describe("tidepool mcp --config", function()
  local dir, file
  before_each(function()
    dir = tree()
    file = dir .. "/conf/tidepool.json"
    write(file, GOOD)
  end)
  after_each(function() rmtree(dir) end)

  local INIT = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":' ..
    '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n' ..
    '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'

  it("a bad file exits 2 with every problem before serving", function()
    write(file, '{"tools": ["missing"], "mcpServers": {"m": {"url": "ftp://x"}}}')
    local out, err, rc = sh(q(ABSBIN) .. " mcp --config " .. q(file) .. " </dev/null")
    assert.are.equal("", out)
    assert.are.equal("tidepool: " .. file .. ": /mcpServers/m/url: expected a string " ..
                     "matching /^https?:///, got \"ftp://x\"; for example \"url\": " ..
                     "\"http://127.0.0.1:3000/mcp\"\n" ..
                     "tidepool: " .. file .. ": /tools/0: \"missing\" is not a directory " ..
                     "(looked for " .. dir .. "/conf/missing; relative paths are relative " ..
                     "to the config file's folder)\n", err)
    assert.are.equal(2, rc)
  end)

  it("serves the file's plugin directories after the built-in ones, with --tools after", function()
    local listing = INIT .. '{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n'
    write(dir .. "/in.txt", listing)
    local out, _, rc = sh("cd / && " .. q(ABSBIN) .. " mcp --expose-tools --workers 1 " ..
                          "--config " .. q(file) .. " --tools " .. q(dir .. "/conf/more") ..
                          " <" .. q(dir .. "/in.txt"))
    assert.are.equal(0, rc)
    local names = {}
    for line in out:gmatch("[^\n]+") do
      local msg = dkjson.decode(line)
      if msg.id == 2 then
        for _, t in ipairs(msg.result.tools) do names[#names + 1] = t.name end
      end
    end
    local have = table.concat(names, " ")
    assert.is_truthy(have:find("hello_say", 1, true), have)
    assert.is_truthy(have:find("bye_say", 1, true), have)
    assert.is_truthy(have:find("kv_get", 1, true), have)
  end)

  it("the file's limits apply to runs, and a limit option wins", function()
    local call = INIT .. '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":' ..
      '"run_lua","arguments":{"code":"while true do end"}}}\n'
    write(dir .. "/in.txt", call)
    for _, c in ipairs({ { "", "500 ms" }, { "--timeout 700ms", "700 ms" } }) do
      -- standard input stays open until the run has answered (the server drops runs
      -- still going when it closes)
      local out, _, rc = sh("(cat " .. q(dir .. "/in.txt") .. "; sleep 4) | " .. q(ABSBIN) ..
                            " mcp --workers 1 --config " .. q(file) .. " " .. c[1])
      assert.are.equal(0, rc)
      local msg
      for line in out:gmatch("[^\n]+") do
        local m = dkjson.decode(line)
        if m.id == 2 then msg = m end
      end
      assert.is_table(msg, out)
      local env = msg.result.structuredContent
      assert.are.equal("limit.time", env.error.code)
      assert.are.equal("the script ran longer than its time limit of " .. c[2], env.error.message)
    end
  end)
end)

describe("the Lua module's config option", function()
  local tidepool = require "tidepool"
  local dir, file
  before_each(function()
    dir = tree()
    file = dir .. "/conf/tidepool.json"
    write(file, GOOD)
  end)
  after_each(function() rmtree(dir) end)

  it("takes a file's path: its limits, tools and workspace; options win", function()
    local env = tidepool.run("return tools.hello.say{}", { config = file })
    assert.are.same({ true, "hi" }, { env.ok, env.result })
    env = tidepool.run("while true do end", { config = file })
    assert.are.equal("the script ran longer than its time limit of 500 ms", env.error.message)
    env = tidepool.run("while true do end", { config = file, timeout = 0.6 })
    assert.are.equal("the script ran longer than its time limit of 600 ms", env.error.message)
    env = tidepool.run("return tools.fs.write{path = 'm.txt', content = 'z'}.bytes",
                       { config = file, builtin_tools = true })
    assert.are.same({ true, 1 }, { env.ok, env.result })
    assert.are.equal("z", read(dir .. "/conf/data/m.txt"))
  end)

  it("takes JSON text, and raises every problem of a bad config", function()
    local text = '{"tools": [' .. dkjson.encode(dir .. "/conf/plugins") .. ']}'
    local env = tidepool.run("return tools.hello.say{}", { config = text })
    assert.are.same({ true, "hi" }, { env.ok, env.result })
    local ok, err = pcall(tidepool.run, "return 1", { config = '{"polcy": 1, "tools": 2}' })
    assert.is_false(ok)
    assert.are.equal("tidepool: option 'config': config: /polcy: unknown section \"polcy\" " ..
                     "(did you mean \"policy\"?); the sections are: " .. SECTIONS .. "\n" ..
                     "config: /tools: expected an array of strings, got an integer (2); for " ..
                     "example \"tools\": [\"plugins\"]", err)
    ok, err = pcall(tidepool.run, "return 1", { config = 5 })
    assert.is_false(ok)
    assert.are.equal("tidepool: option 'config' must be a config file's path or its JSON text",
                     err)
  end)
end)
