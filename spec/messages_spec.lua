-- What a user of the command line sees: exact messages and exit statuses (the table in
-- engine/front/options.h). `config check` runs the checks of `run --strict` and names the
-- config's JSON pointer; bad values name their flag; check says ok; the summary counts;
-- a timeout names its limit; npx-started servers are announced; an upstream server's
-- raw name reaches its tools; a plugin's error shows no host path.
local H = require("spec.helper")
local BIN, q, sh, write = H.BIN, H.q, H.sh, H.write

local dir
setup(function()
  dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. q(dir)))
end)
teardown(function() os.execute("rm -rf " .. q(dir)) end)

local function file(name, text)
  write(dir .. "/" .. name, text)
  return dir .. "/" .. name
end

describe("config check runs the checks of run --strict", function()
  local cases = {
    { "unset.json", [[{"mcpServers": {"github": {"command": "sh",
        "env": {"TOKEN": "env:TP_MESSAGES_UNSET"}}}}]],
      "/mcpServers/github/env/TOKEN: the environment variable TP_MESSAGES_UNSET is not set "
      .. "(the value \"env:TP_MESSAGES_UNSET\" reads it); set it, or write the value itself" },
    { "mcpnocmd.json", [[{"mcpServers": {"gh": {"command": "tp-no-such-program"}}}]],
      "/mcpServers/gh/command: \"tp-no-such-program\" is not found in PATH; install it, or "
      .. "give its absolute path" },
    { "argv0.json", [[{"commands": [{"argv0": "sh"}, {"argv0": "tp-no-such-program"}]}]],
      "/commands/1/argv0: \"tp-no-such-program\" is not found in PATH (proc.run will answer "
      .. "not_found for it); install it, or remove the entry" },
    { "inject.json", [[{"http": {"allow": ["x.test"],
        "inject": {"x.test": {"Authorization": "env:TP_MESSAGES_UNSET"}}}}]],
      "/http/inject/x.test/Authorization: the environment variable TP_MESSAGES_UNSET is not "
      .. "set (the value \"env:TP_MESSAGES_UNSET\" reads it); set it, or write the value itself" },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ": both refuse it with exit 3, naming the JSON pointer", function()
      local path = file(c[1], c[2])
      local out, err, rc = sh(BIN .. " config check " .. q(path))
      assert.are.equal(3, rc)
      assert.are.equal("", out)
      assert.are.equal(path .. ": " .. c[3] .. "\n" .. path .. ": refused: 1 problem of the "
        .. "config on this machine (above)\n", err)
      out, err, rc = sh(BIN .. " run --strict --config " .. q(path) .. " -", "return 1")
      assert.are.equal(3, rc)
      assert.are.equal("", out)
      assert.are.equal("tidepool: " .. path .. ": " .. c[3] .. "\ntidepool: --strict: refused: "
        .. "1 problem of the config on this machine (above)\n", err)
      if c[1]:find("^mcp") or c[1] == "unset.json" then return end  -- no real server
      -- without --strict: a warning, and the script runs
      out, err, rc = sh(BIN .. " run --config " .. q(path) .. " -", "return tools ~= nil")
      assert.are.equal(0, rc)
      assert.are.equal("true\n", out)
      assert.are.equal("tidepool: warning: " .. path .. ": " .. c[3] .. "\n", err)
    end)
  end

  it("a plugin of the config's tools directories that cannot load: exit 3 from both", function()
    local tools = dir .. "/broken"
    assert(os.execute("mkdir -p " .. q(tools)))
    write(tools .. "/bad.lua", "return { name = 'bad.one' }\n")
    local path = file("plugins.json", '{"tools": ["broken"]}')
    local _, err, rc = sh(BIN .. " config check " .. q(path))
    assert.are.equal(3, rc)
    assert.are.equal(path .. ": " .. tools .. "/bad.lua:1: tool bad.one: no handler (handler = "
      .. "function(args, ctx) ... end)\n" .. path .. ": refused: 1 plugin problem (above)\n", err)
    _, err, rc = sh(BIN .. " run --strict --config " .. q(path) .. " -", "return 1")
    assert.are.equal(3, rc)
    assert.matches("\ntidepool: %-%-strict: refused: 1 plugin problem %(above%)\n$", err)
  end)

  it("a good file: ok and its summary, exit 0", function()
    local path = file("good.json", '{"commands": [{"argv0": "sh"}]}')
    local out, err, rc = sh(BIN .. " config check " .. q(path))
    assert.are.equal(0, rc)
    assert.are.equal("", err)
    assert.are.equal(path .. ": ok: 1 section (commands), 0 MCP servers, 1 command, 0 http "
      .. "allow rules, 0 plugin directories\n", out)
  end)
end)

describe("the config schema", function()
  it("has an $id, and checks SIZE, COUNT and DURATION strings with the parser's words",
    function()
      local out = sh(BIN .. " config schema")
      assert.matches('"%$id": "urn:tidepool:config:1"', out)
      local path = file("units.json", [[{"limits": {"memory": "12Q", "timeout": "soon",
        "tool_calls": "1e3", "cpu": "1.5s", "tool_bytes": "4MiB", "max_output": "64k"},
        "server": {"max_body": "1T", "idle_timeout": "2min"}}]])
      local _, err, rc = sh(BIN .. " config check " .. q(path))
      assert.are.equal(2, rc)
      assert.are.equal(
        path .. ": /limits/memory: bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)\n"
        .. path .. ": /limits/timeout: bad duration 'soon' (use 500ms, 2s, 1m)\n"
        .. path .. ": /limits/tool_calls: bad count '1e3' (use a whole number)\n"
        .. path .. ": /server/max_body: bad size '1T' (use bytes or a suffix: 512K, 64M, 1G)\n",
        err)
    end)
end)

describe("exit statuses follow one rule", function()
  it("a usage error is 2 in mcp too: --http 99999", function()
    local out, err, rc = sh(BIN .. " mcp --http 99999")
    assert.are.equal(2, rc)
    assert.are.equal("", out)
    assert.are.equal("tidepool: --http: '99999': expected PORT (0 to 65535), ADDR:PORT or "
      .. "[ADDR6]:PORT with ADDR an IP address (127.0.0.1:8080)\nTry 'tidepool --help'.\n", err)
  end)

  it("a missing --tools directory is a warning in run and in mcp", function()
    local out, err, rc = sh(BIN .. " run --tools /nonexistent/tp-tools -", "return tools ~= nil")
    assert.are.equal(0, rc)
    assert.are.equal("true\n", out)
    assert.matches("^tidepool: warning: [^\n]*/nonexistent/tp%-tools", err)
    out, err, rc = sh(BIN .. " mcp --workers 1 --tools /nonexistent/tp-tools")
    assert.are.equal(0, rc)
    assert.are.equal("", out)
    assert.matches("^tidepool: warning: %-%-tools: '/nonexistent/tp%-tools' is not a directory: "
      .. "no tools from it\n", err)
    assert.matches("%(%d+ tools, 1 worker%)\n", err)  -- singular
  end)

  it("bad values name their flag, in run and in mcp", function()
    local cases = {
      { "run --memory 12Q -", "--memory: bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)" },
      { "run --workspace-max 3X -", "--workspace-max: bad size '3X' (use bytes or a suffix: "
        .. "512K, 64M, 1G)" },
      { "mcp --memory 12Q", "--memory: bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)" },
      { "mcp --session-idle soon", "--session-idle: bad duration 'soon' (use 500ms, 2s, 1m)" },
      { "mcp --workers 0", "--workers: bad count '0' (1 to 64)" },
      { "mcp --max-sessions x", "--max-sessions: bad count 'x' (0 to 100000)" },
    }
    for _, c in ipairs(cases) do
      local out, err, rc = sh(BIN .. " " .. c[1], "return 1")
      assert.are.equal(2, rc, c[1])
      assert.are.equal("", out)
      assert.are.equal("tidepool: " .. c[2] .. "\nTry 'tidepool --help'.\n", err, c[1])
    end
  end)
end)

describe("what run and check print", function()
  it("check says ok", function()
    local path = file("ok.lua", "return 1")
    local out, err, rc = sh(BIN .. " check " .. q(path))
    assert.are.same({ path .. ": ok\n", "", 0 }, { out, err, rc })
    out, err, rc = sh(BIN .. " check -", "return 1")
    assert.are.same({ "standard input: ok\n", "", 0 }, { out, err, rc })
  end)

  it("the summary line counts the failed calls", function()
    local _, err = sh(BIN .. " run -", [[
      for i = 1, 3 do pcall(tools.kv.get, {}) end
      return tools.time.now{} ~= nil]])
    assert.matches("^%-%- 4 tool calls %(3 failed%), ", err)
  end)

  it("a tool timeout names the limit that ran out", function()
    local tools = dir .. "/slow"
    assert(os.execute("mkdir -p " .. q(tools)))
    write(tools .. "/slow.lua", [[return {
      { name = "slow.limit", handler = function(_, ctx) ctx.sleep(5000) return {} end },
      { name = "slow.own", timeout_ms = 200,
        handler = function(_, ctx) ctx.sleep(5000) return {} end },
    }]])
    local out = sh(BIN .. " run --no-builtin-tools --tools " .. q(tools)
      .. " --tool-timeout 300ms -", [[
      local _, a = pcall(tools.slow.limit, {})
      local _, b = pcall(tools.slow.own, {})
      return a.code .. ": " .. a.message .. "\n" .. b.code .. ": " .. b.message]])
    assert.are.equal("tool.timeout: tools.slow.limit timed out after 300ms (the tool_timeout "
      .. "limit, --tool-timeout)\ntool.timeout: tools.slow.own timed out after 200ms (the tool's "
      .. "own timeout_ms)\n", out)
  end)

  it("a plugin's error names its file and line, never the host's folders", function()
    local out = sh(BIN .. " run --memory 256M -", [[
      local big = string.rep("x", 1000 * 1000)
      for i = 1, 20 do
        local ok, e = pcall(tools.kv.set, {key = "k" .. i, value = big})
        if not ok then return e.message end
      end]])
    assert.are.equal("tools.kv.set failed: the kv store is full: storing 1000002 bytes under "
      .. "\"k17\" would bring it to 17000076 bytes, over its 16777216-byte limit; delete keys "
      .. "(kv.delete) or store less\n", out)
    -- a storage failure (the state database locked by another process once the run has
    -- opened it: root cannot be refused a file, a lock still holds): no host path either
    local db = dir .. "/locked.db"
    out = sh("python3 - " .. q(BIN) .. " " .. q(db), [[
import os, sqlite3, subprocess, sys, time
tp, db = sys.argv[1], os.path.realpath(sys.argv[2])
p = subprocess.Popen([tp, "run", "--state", "sqlite:" + db, "-"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
try:
    p.stdin.write(b'tools.time.sleep{ms = 3000} '
                  b'local ok, e = pcall(tools.kv.set, {key = "b", value = 2}) return e.message')
    p.stdin.close()
    def opened():
        fds = "/proc/%d/fd" % p.pid
        try: return any(os.path.realpath(os.path.join(fds, f)) == db for f in os.listdir(fds))
        except OSError: return False
    end = time.time() + 60
    while not opened() and time.time() < end: time.sleep(0.02)
    c = sqlite3.connect(db, isolation_level=None, timeout=30)
    c.execute("BEGIN EXCLUSIVE")
    sys.stdout.write(p.stdout.read().decode())
    p.wait(timeout=60)
finally:
    if p.poll() is None: p.kill(); p.wait()
]])
    assert.are.equal("tools.kv.set failed: the kv store could not store \"b\": the state database "
      .. "failed to begin a write: database is locked\n", out)
    local tools = dir .. "/oops"
    assert(os.execute("mkdir -p " .. q(tools)))
    write(tools .. "/oops.lua", [[return { name = "oops.nil", handler = function(args)
      return args.missing.field end }]])
    out = sh(BIN .. " run --no-builtin-tools --tools " .. q(tools) .. " -",
      "local _, e = pcall(tools.oops['nil'], {}) return e.message")
    assert.are.equal("tools.oops.nil failed: oops.lua:2: attempt to index a nil value (field "
      .. "'missing')\n", out)
  end)
end)

describe("upstream servers", function()
  local mods = "spec/mcp/node_modules/@modelcontextprotocol"
  local have = sh("command -v node >/dev/null && test -d " .. mods .. "/server-memory && echo y")

  it("a server's raw name reaches its tools: tools[\"my-mem\"]; npx is announced", function()
    if not have:find("y") then
      pending("needs node and spec/mcp/node_modules (npm install --prefix spec/mcp)")
      return
    end
    local abs = sh("pwd"):gsub("\n", "") .. "/" .. mods .. "/server-memory/dist/index.js"
    -- an `npx` that starts the installed package, as npx would after downloading it
    local bin = dir .. "/bin"
    assert(os.execute("mkdir -p " .. q(bin)))
    write(bin .. "/npx", "#!/bin/sh\nexec node " .. q(abs) .. "\n")
    assert(os.execute("chmod +x " .. q(bin .. "/npx")))
    local path = file("mem.json", ([[{"mcpServers": {"my-mem": {"command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-memory"],
      "env": {"MEMORY_FILE_PATH": "%s/memory.json"}}}}]]):format(dir))
    local out, err, rc = sh("PATH=" .. q(bin) .. ":$PATH " .. BIN .. " run --config "
      .. q(path) .. " -", [[
      local a = tools["my-mem"].read_graph{}
      local b = tools.my_mem.read_graph{}
      local c = tools["my-mem"]["read_graph"]{}
      return #a.entities + #b.entities + #c.entities]])
    assert.are.equal(0, rc, err)
    assert.are.equal("0\n", out)
    local _, n = err:gsub("tidepool: starting upstream server my%-mem %(npx may be downloading "
      .. "it%)\n", "")
    assert.are.equal(1, n, err)
  end)
end)
