-- proc.run (tools/proc.lua, engine/host/proc.c, libexec/tidepool-confine.c): allowed
-- commands run confined, through build/tidepool run --config. Each attack a confined
-- command might try has its test: writing outside the workspace, connecting out, a fork
-- bomb, ptrace and namespaces, reading tidepool's own environment.
local dkjson = require "dkjson"
local uv = require "luv"

local H = require("spec.helper")
local BUILD, BIN, q = H.BUILD, H.BIN, H.q
-- The PATH tidepool runs with: argv0 entries are resolved in it at load.
local HOST_PATH = "/usr/local/bin:/usr/bin:/bin"

local temps = {}
local function temp_file(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  temps[#temps + 1] = path
  return path
end

local function temp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -p " .. q(path)))
  temps[#temps + 1] = path
  return path
end

teardown(function()
  for _, p in ipairs(temps) do os.execute("rm -rf " .. q(p)) end
end)

local function landlock_abi()
  local f = io.popen(q(BUILD .. "/tidepool-confine") .. " -- /bin/true true 3>&1", "r")
  local out = f:read("a")
  f:close()
  local cg = out:match("cgroup=(%S+)")  -- root: the helper made a pids cgroup; its parent
  if cg then os.execute("rmdir " .. q(cg)) end  -- (proc.run) removes it, here we do
  return tonumber(out:match("landlock=(%d+)")) or 0
end
local ABI = landlock_abi()

-- Runs script under `commands` (a Lua list of entries) with a workspace (ws: a
-- directory, false: none); returns the envelope and stderr.
-- prefix: a command line that runs the rest (unshare ...), or nil.
local function run(script, commands, ws, extra_env, timeout, prefix)
  local cfg = temp_file(commands and dkjson.encode({ commands = commands }) or "{}")
  local src = temp_file(script)
  local errf = os.tmpname()
  temps[#temps + 1] = errf
  local cmd = ("%s env PATH=%s %s %s run --json --timeout %s --cpu 20s --config %s %s %s 2>%s")
    :format(prefix or "", HOST_PATH, extra_env or "", BIN, timeout or "30s", q(cfg),
            ws and ("--workspace " .. q(ws)) or "", q(src), q(errf))
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  p:close()
  local f = assert(io.open(errf, "rb"))
  local err = f:read("a")
  f:close()
  local env = dkjson.decode(out, 1, dkjson.null)
  assert(type(env) == "table", "not JSON: " .. out .. err)
  return env, err
end

local function ok_result(script, commands, ws, extra_env)
  local env, err = run(script, commands, ws, extra_env)
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message) or err)
  return env.result, err
end

-- The error ({code, message}) a call raises.
local function call_error(args, commands, ws)
  local r = ok_result(("local ok, e = pcall(tools.proc.run, %s) "
    .. "assert(not ok, 'the call did not fail') return {code = e.code, message = e.message}")
    :format(args), commands, ws)
  return r
end

local SH = { argv0 = "sh" }
local GIT = { argv0 = "git", sub = { "status", "log", "diff" }, deny_flags = { "-c", "--exec" } }

describe("proc.run: the allowlist", function()
  it("is not offered without a commands section", function()
    local r = ok_result("return (pcall(tools.describe, 'proc.run'))", nil, temp_dir())
    assert.is_false(r)
    r = ok_result("return (pcall(tools.describe, 'proc.run'))", {}, temp_dir())
    assert.is_true(r)
  end)

  it("runs an allowed command with argv only, in the workspace, and returns its result",
    function()
    local ws = temp_dir()
    local r = ok_result([[return tools.proc.run{cmd = "sh",
      args = {"-c", "echo out; echo err >&2; pwd; exit 3", "$HOME"}}]], { SH }, ws)
    assert.are.equal(3, r.exit_code)
    assert.are.equal(dkjson.null, r.signal)
    assert.are.equal("out\n" .. ws .. "\n", r.stdout)
    assert.are.equal("err\n", r.stderr)
    assert.is_false(r.truncated)
    assert.is_false(r.timed_out)
    assert.is_true(r.seccomp == nil and r.sandbox.seccomp)
    assert.are.equal(ABI > 0 and ABI or false, r.sandbox.landlock_abi)
    assert.is_not_false(r.sandbox.nproc)
    assert.is_nil(r.error_kind)
  end)

  it("refuses a command outside the allowlist with tool.denied, naming what is allowed",
    function()
    local e = call_error([[{cmd = "rm", args = {"-rf", "/"}}]], { SH, GIT }, temp_dir())
    assert.are.same({ code = "tool.denied", message = "tools.proc.run was denied: "
      .. "command_not_allowed: 'rm' is not in the commands allowlist (allowed: sh, git). "
      .. "Advice: use one of those; there is no shell, so pipes and redirections must be "
      .. "done in Lua." }, e)
  end)

  it("refuses a subcommand the entry does not list, naming the closest rule", function()
    local e = call_error([[{cmd = "git", args = {"push", "origin"}}]], { GIT }, temp_dir())
    assert.are.same({ code = "tool.denied", message = "tools.proc.run was denied: "
      .. "command_not_allowed: git is allowed with sub status|log|diff; 'push' is not one "
      .. "of them. Advice: change the arguments to fit the rule, or ask the operator to "
      .. "extend the \"commands\" config." }, e)
    e = call_error([[{cmd = "git"}]], { GIT }, temp_dir())
    assert.matches("git is allowed with sub status|log|diff; no subcommand was given", e.message,
      1, true)
  end)

  it("refuses a denied flag anywhere in args, alone, as --flag=value or -fVALUE", function()
    for _, args in ipairs({ '{"status", "-c", "core.pager=evil"}',
                            '{"log", "--exec=evil"}', '{"diff", "-ccore.x=y"}' }) do
      local e = call_error(("{cmd = 'git', args = %s}"):format(args), { GIT }, temp_dir())
      assert.are.equal("tool.denied", e.code)
      assert.matches("command_not_allowed: git refuses the flag %-", e.message)
    end
    local e = call_error([[{cmd = "git", args = {"log", "--exec=evil"}}]], { GIT }, temp_dir())
    assert.are.equal("tools.proc.run was denied: command_not_allowed: git refuses the flag "
      .. "--exec (args[2] = '--exec=evil'). Advice: change the arguments to fit the rule, "
      .. "or ask the operator to extend the \"commands\" config.", e.message)
  end)

  it("refuses a denied long flag abbreviated as getopt_long takes it, with or without =value",
    function()
    for _, a in ipairs({ "--e", "--ex", "--exe", "--exe=evil", "--e=evil", "--exec" }) do
      local e = call_error(("{cmd = 'git', args = {'log', %q}}"):format(a), { GIT }, temp_dir())
      assert.are.equal("tool.denied", e.code)
      assert.are.equal("tools.proc.run was denied: command_not_allowed: git refuses the flag "
        .. "--exec (args[2] = '" .. a .. "'). Advice: change the arguments to fit the rule, "
        .. "or ask the operator to extend the \"commands\" config.", e.message)
    end
    -- not prefixes of it: other flags, "--", a longer name, a value that looks like one
    local ws = temp_dir()
    assert(os.execute("git init -q " .. q(ws)))
    for _, args in ipairs({ '{"diff", "--stat"}', '{"diff", "--"}',
                            '{"log", "--format=--ex", "-1", "--all"}' }) do
      local r = ok_result(("return tools.proc.run{cmd = 'git', args = %s}"):format(args),
        { GIT }, ws)
      assert.are.equal("number", type(r.exit_code), args)
    end
  end)

  it("allows a listed subcommand", function()
    local ws = temp_dir()
    assert(os.execute("git init -q " .. q(ws)))
    local r = ok_result([[return tools.proc.run{cmd = "git", args = {"status", "--short"}}]],
      { GIT }, ws)
    assert.are.equal(0, r.exit_code, r.stderr)
    assert.are.equal("", r.stdout)
  end)

  it("a program missing at load is a load warning, and not_found when called", function()
    local env, err = run([[local ok, e = pcall(tools.proc.run, {cmd = "no-such-prog-x"})
      return {code = e.code, message = e.message}]],
      { SH, { argv0 = "no-such-prog-x" } }, temp_dir())
    assert.is_true(env.ok)
    assert.are.same({ code = "tool.failed", message = "tools.proc.run failed: not_found: "
      .. "no-such-prog-x: not found in PATH (" .. HOST_PATH .. "). Advice: the program is "
      .. "not installed on the host; use another command of the allowlist (sh, "
      .. "no-such-prog-x)." }, env.result)
    -- the config's problem, named by its JSON pointer after the file, shown once (the
    -- config's check and tools/proc.lua both find it)
    assert.matches("^tidepool: warning: [^\n]+: /commands/1/argv0: \"no%-such%-prog%-x\" is "
      .. "not found in PATH %(proc.run will answer not_found for it%); install it, or remove "
      .. "the entry\n$", err)
  end)
end)

describe("proc.run: directory and environment", function()
  it("refuses a cwd that escapes the workspace", function()
    local e = call_error([[{cmd = "sh", args = {"-c", "pwd"}, cwd = "../"}]], { SH }, temp_dir())
    assert.are.equal("tool.invalid_input", e.code)
    assert.matches("cwd: ../: escapes the workspace", e.message, 1, true)
  end)

  it("runs in a subdirectory of the workspace", function()
    local ws = temp_dir()
    assert(os.execute("mkdir " .. q(ws .. "/sub")))
    local r = ok_result([[return tools.proc.run{cmd = "sh", args = {"-c", "pwd"}, cwd = "sub"}]],
      { SH }, ws)
    assert.are.equal(ws .. "/sub\n", r.stdout)
  end)

  it("without a workspace: a fresh temporary directory, removed after; cwd refused", function()
    local r = ok_result([[return tools.proc.run{cmd = "sh",
      args = {"-c", "pwd; echo x > f; cat f"}}]], { SH }, false)
    local dir = r.stdout:match("^(.-)\n")
    assert.matches("/tidepool%-proc%-", dir)
    assert.are.equal(dir .. "\nx\n", r.stdout)
    assert.is_nil(io.open(dir .. "/f"))
    local e = call_error([[{cmd = "sh", args = {"-c", "pwd"}, cwd = "x"}]], { SH }, false)
    assert.are.equal("tool.invalid_input", e.code)
  end)

  it("scrubs the environment to PATH and the entry's env; the script sets listed names only",
    function()
    local entry = { argv0 = "env", env = { FOO = "bar", TOKEN = "env:TP_PROC_SECRET" } }
    local r = ok_result([[return tools.proc.run{cmd = "env"}]], { entry }, temp_dir(),
      "TP_PROC_SECRET=s3cret OTHER=leak")
    assert.are.equal("FOO=bar\nPATH=/usr/local/bin:/usr/bin:/bin\nTOKEN=s3cret\n", r.stdout)
    r = ok_result([[return tools.proc.run{cmd = "env", env = {FOO = "baz"}}]], { entry },
      temp_dir())
    assert.matches("FOO=baz\n", r.stdout, 1, true)
    local e = call_error([[{cmd = "env", env = {LD_PRELOAD = "/x.so"}}]], { entry }, temp_dir())
    assert.are.same({ code = "tool.denied", message = "tools.proc.run was denied: "
      .. "command_not_allowed: env.LD_PRELOAD: env does not take that variable from scripts "
      .. "(it takes: FOO, TOKEN). Advice: drop env.LD_PRELOAD." }, e)
  end)

  it("refuses an argument with a NUL byte (the program would see it cut)", function()
    local e = call_error([[{cmd = "sh", args = {"-c", "echo a\0b"}}]], { SH }, temp_dir())
    assert.are.same({ code = "tool.invalid_input", message = "tools.proc.run refused its "
      .. "arguments: args[2] holds a NUL byte, which no program argument can" }, e)
  end)

  it("feeds stdin", function()
    local r = ok_result([[return tools.proc.run{cmd = "sh", args = {"-c", "tr a-z A-Z"},
      stdin = "hello\n"}]], { SH }, temp_dir())
    assert.are.equal("HELLO\n", r.stdout)
    r = ok_result([[return tools.proc.run{cmd = "sh", args = {"-c", "wc -c"},
      stdin = ("x"):rep(3000000)}]], { SH }, temp_dir())
    assert.are.equal("3000000", r.stdout:match("%d+"))
  end)

  it("a command that exits without reading its stdin does not kill tidepool (SIGPIPE)",
    function()
    local env = run([[return tools.proc.run{cmd = "sh", args = {"-c", "exit 4"},
      stdin = ("x"):rep(3000000)}]], { SH }, temp_dir())
    assert.is_true(env.ok)
    assert.are.equal(4, env.result.exit_code)
  end)
end)

describe("proc.run: confinement", function()
  it("a command cannot write outside the workspace (Landlock)", function()
    if ABI == 0 then
      print("# skipped: this kernel has no Landlock")
      return
    end
    local ws = temp_dir()
    local outside = temp_dir() .. "/escaped"
    local r = ok_result(([[return tools.proc.run{cmd = "sh",
      args = {"-c", "echo in > inside && echo x > %s"}}]]):format(outside), { SH }, ws)
    assert.are.equal(2, r.exit_code)
    assert.matches("Permission denied", r.stderr, 1, true)
    assert.is_nil(io.open(outside))
    local f = assert(io.open(ws .. "/inside"))
    assert.are.equal("in\n", f:read("a"))
    f:close()
  end)

  it("a command has /dev/null and /dev/urandom, not the rest of /dev (Landlock)", function()
    if ABI == 0 then
      print("# skipped: this kernel has no Landlock")
      return
    end
    local r = ok_result([[return tools.proc.run{cmd = "sh", args = {"-c",
      "echo x > /dev/null && head -c 4 /dev/urandom | wc -c && ls /dev"}}]], { SH }, temp_dir())
    assert.are.equal("4", r.stdout:match("%d+"))
    assert.are.equal(2, r.exit_code)
    assert.matches("ls: cannot open directory '/dev': Permission denied", r.stderr, 1, true)
  end)

  it("a command cannot read tidepool's own environment through /proc (Landlock)", function()
    if ABI == 0 then
      print("# skipped: this kernel has no Landlock")
      return
    end
    local r = ok_result([[return tools.proc.run{cmd = "sh", args = {"-c",
      "cat /proc/$PPID/environ"}}]], { SH }, temp_dir(), "TP_PROC_SECRET=s3cret")
    assert.are_not.equal(0, r.exit_code)
    assert.is_nil(r.stdout:find("s3cret", 1, true))
    assert.matches("Permission denied", r.stderr, 1, true)
  end)

  it("a command cannot connect out without \"net\"; with it, it can", function()
    local server = uv.new_tcp()
    assert(server:bind("127.0.0.1", 0))
    assert(server:listen(8, function() end))
    local port = server:getsockname().port
    local script = ([[return tools.proc.run{cmd = "perl", args = {"-e",
      'use Socket; socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n"; ' ..
      'connect($s, pack_sockaddr_in(%d, inet_aton("127.0.0.1"))) or die "connect: $!\n"; ' ..
      'print "connected\n"'}}]]):format(port)
    local r = ok_result(script, { { argv0 = "perl" } }, temp_dir())
    assert.are.equal("socket: Operation not permitted\n", r.stderr)
    assert.are.equal("", r.stdout)
    assert.is_false(r.sandbox.net)
    r = ok_result(script, { { argv0 = "perl", net = true } }, temp_dir())
    assert.are.equal("connected\n", r.stdout, r.stderr)
    server:close()
    uv.run("nowait")
  end)

  it("ptrace and new namespaces are refused (seccomp)", function()
    local r = ok_result([[return tools.proc.run{cmd = "unshare", args = {"-U", "true"}}]],
      { { argv0 = "unshare" } }, temp_dir())
    assert.are.equal(1, r.exit_code)
    assert.matches("Operation not permitted", r.stderr, 1, true)
    r = ok_result([[return tools.proc.run{cmd = "perl", args = {"-e",
      'my $r = syscall(101, 16, getppid(), 0, 0); print "$r $!\n"'}}]],   -- PTRACE_ATTACH
      { { argv0 = "perl" } }, temp_dir())
    assert.are.equal("-1 Operation not permitted\n", r.stdout)
  end)

  it("a fork bomb is stopped by the process limit, and the run goes on", function()
    local r = ok_result([[return tools.proc.run{cmd = "sh", timeout_ms = 20000, args = {"-c",
      "i=0; while [ $i -lt 200 ]; do sleep 60 & i=$((i+1)); done; echo all"}}]],
      { SH }, temp_dir())
    assert.are.equal(2, r.exit_code)
    assert.matches("Cannot fork", r.stderr, 1, true)
    assert.are.equal("", r.stdout)
    assert.is_false(r.timed_out)
    r = ok_result([[return tools.proc.run{cmd = "sh", timeout_ms = 1500, args = {"-c",
      "b() { b | b & }; b; sleep 10"}}]], { SH }, temp_dir())
    assert.is_true(r.timed_out)
    assert.are.equal("timeout", r.error_kind)
  end)
end)

-- Root, whom RLIMIT_NPROC never binds, on a machine without a cgroup file system (a
-- chroot's bare /sys, as in make test-fresh): /sys/fs/cgroup hidden under a tmpfs in a
-- mount namespace of the test's own.
-- (Its mounts made private first, so that the tmpfs reaches no other namespace; in a
-- chroot "/" is no mount point, /sys is.)
local NO_CGROUP = "unshare --mount --propagation unchanged sh -c " .. q(
  '{ mount --make-rprivate / 2>/dev/null || mount --make-rprivate /sys; } && '
  .. 'mount -t tmpfs none /sys/fs/cgroup && exec "$@"') .. " sh"
local function as_root_without_cgroups()
  if uv.getuid() ~= 0 then
    print("# skipped: not root (RLIMIT_NPROC binds this user)")
    return false
  end
  return true
end

describe("proc.run: root without a cgroup file system", function()
  it("the process limit still holds (a pids cgroup on a mount of the helper's own)",
    function()
    if not as_root_without_cgroups() then return end
    local env = run([[return tools.proc.run{cmd = "sh", timeout_ms = 20000, args = {"-c",
      "i=0; while [ $i -lt 200 ]; do sleep 60 & i=$((i+1)); done; echo all"}}]],
      { SH }, temp_dir(), nil, nil, NO_CGROUP)
    assert(env.ok, env.error and env.error.message)
    local r = env.result
    assert.are.equal("cgroup", r.sandbox.nproc)
    assert.are.equal(2, r.exit_code)
    assert.matches("Cannot fork", r.stderr, 1, true)
    assert.are.equal("", r.stdout)
  end)

  it("where root cannot mount one either, the load warns that no process limit holds",
    function()
    if not as_root_without_cgroups() then return end
    local env, err = run([[return tools.proc.run{cmd = "sh", args = {"-c", "echo hi"}}]],
      { SH }, temp_dir(), nil, nil, NO_CGROUP .. " setpriv --bounding-set -sys_admin")
    assert(env.ok, env.error and env.error.message)
    assert.are.equal(false, env.result.sandbox.nproc)
    assert.are.equal("hi\n", env.result.stdout)
    assert.matches("^tidepool: warning: [^\n]+: /commands: tidepool runs as root, which "
      .. "RLIMIT_NPROC does not bind, and no pids cgroup can be made here %(no cgroup "
      .. "filesystem with the pids controller that root may write or mount%): commands run "
      .. "without a process limit, and a fork bomb is stopped only by its timeout; run "
      .. "tidepool as another user, or give it a pids cgroup %(a container's "
      .. "%-%-pids%-limit%)\n$", err)
  end)
end)

describe("proc.run: the helper", function()
  it("a helper that does not confirm the confinement fails the call; the command never runs",
    function()
    local ws = temp_dir()
    local env = run([[return tools.proc.run{cmd = "sh", args = {"-c", "echo x > ran"}}]],
      { SH }, ws, "TIDEPOOL_CONFINE=/bin/true")
    assert.are.equal("tool.failed", env.error.code)
    assert.are.equal("tools.proc.run failed: /bin/true ended (exit status 0) before "
      .. "confirming the confinement of sh", env.error.message)
    assert.is_nil(io.open(ws .. "/ran"))
    env = run([[return tools.proc.run{cmd = "sh", args = {"-c", "true"}}]], { SH }, ws,
      "TIDEPOOL_CONFINE=tidepool-confine")
    assert.are.equal("tool.unavailable", env.error.code)
    assert.are.equal("tools.proc.run is unavailable: proc.run cannot confine commands here: "
      .. "TIDEPOOL_CONFINE=tidepool-confine is not an executable file's absolute path",
      env.error.message)
  end)
end)

describe("proc.run: time and output", function()
  it("a timeout stops the group and keeps the partial output", function()
    local r = ok_result([[return tools.proc.run{cmd = "sh", timeout_ms = 700,
      args = {"-c", "echo started; sleep 20; echo never"}}]], { SH }, temp_dir())
    assert.is_true(r.timed_out)
    assert.are.equal("started\n", r.stdout)
    assert.are.equal("timeout", r.error_kind)
    assert.matches("ran past 700 ms", r.advice, 1, true)
    assert.are.equal(15, r.signal)  -- SIGTERM
    assert.is_true(r.duration_ms >= 700 and r.duration_ms < 10000, tostring(r.duration_ms))
  end)

  it("a run that ends while its command runs kills the command's group", function()
    local ws = temp_dir()
    local env = run([[return tools.proc.run{cmd = "sh", args = {"-c",
      "sleep 30 & echo $! > child; echo $$ > pid; wait"}}]], { SH }, ws, nil, "1s")
    assert.are.equal("limit.time", env.error and env.error.code)
    local function alive(file)
      local f = assert(io.open(ws .. "/" .. file))
      local pid = f:read("l")
      f:close()
      for _ = 1, 100 do
        local st = io.open("/proc/" .. pid .. "/stat")
        if not st then return false end
        local state = st:read("a"):match("^%d+ %b() (%a)")
        st:close()
        if state == "Z" then return false end
        uv.sleep(20)
      end
      return true
    end
    assert.is_false(alive("pid"))
    assert.is_false(alive("child"))
  end)

  it("a timeout above the entry's is refused", function()
    local e = call_error([[{cmd = "sh", args = {"-c", "true"}, timeout_ms = 5000}]],
      { { argv0 = "sh", timeout_ms = 1000 } }, temp_dir())
    assert.are.same({ code = "tool.invalid_input", message = "tools.proc.run refused its "
      .. "arguments: timeout_ms = 5000 is above sh's limit of 1000" }, e)
  end)

  it("output past max_output is cut, with error_kind output_capped", function()
    local r = ok_result([[return tools.proc.run{cmd = "sh", max_output = 1000,
      args = {"-c", "yes | head -c 100000; echo done >&2"}}]], { SH }, temp_dir())
    assert.are.equal(1000, #r.stdout)
    assert.are.equal("", r.stderr)
    assert.is_true(r.truncated)
    assert.are.equal(0, r.exit_code)
    assert.are.equal("output_capped", r.error_kind)
  end)

  it("20 commands run at once from parallel", function()
    local t0 = uv.hrtime()
    local r = ok_result([[
      local fs = {}
      for i = 1, 20 do
        fs[i] = function()
          return tools.proc.run{cmd = "sh", args = {"-c", "sleep 1; echo $0", tostring(i)}}
        end
      end
      local rs = { parallel(table.unpack(fs)) }
      local out = {}
      for i, x in ipairs(rs) do out[i] = x.stdout end
      return out]], { SH }, temp_dir())
    local secs = (uv.hrtime() - t0) / 1e9
    local want = {}
    for i = 1, 20 do want[i] = i .. "\n" end
    assert.are.same(want, r)
    assert.is_true(secs < 10, "20 one-second commands took " .. secs .. " s")
  end)
end)

describe("proc.run: streaming", function()
  it("output lines reach the MCP caller as progress notifications while the command runs",
    function()
    local ws = temp_dir()
    local cfg = temp_file(dkjson.encode({ commands = { SH } }))
    local stdin, stdout, stderr = uv.new_pipe(), uv.new_pipe(), uv.new_pipe()
    local proc = uv.spawn(BIN, { args = { "mcp", "--config", cfg, "--workspace", ws },
      stdio = { stdin, stdout, stderr } }, function() end)
    stderr:read_start(function() end)
    assert(proc, "cannot start tidepool mcp")
    local msgs, buf = {}, ""
    stdout:read_start(function(_, data)
      if not data then return end
      buf = buf .. data
      for line in buf:gmatch("([^\n]*)\n") do msgs[#msgs + 1] = dkjson.decode(line) end
      buf = buf:match("([^\n]*)$")
    end)
    local function send(t) stdin:write(dkjson.encode(t) .. "\n") end
    send({ jsonrpc = "2.0", id = 1, method = "initialize", params = {
      protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "spec",
      version = "1" } } })
    send({ jsonrpc = "2.0", method = "notifications/initialized" })
    send({ jsonrpc = "2.0", id = 2, method = "tools/call", params = { name = "run_lua",
      _meta = { progressToken = "p1" }, arguments = { code = [[
        local r = tools.proc.run{cmd = "sh", args = {"-c",
          "echo line one; sleep 0.3; echo line two >&2; printf tail"}}
        return r.stdout]] } } })
    local t0 = uv.hrtime()
    local answer
    repeat
      uv.run("once")
      for _, m in ipairs(msgs) do if m.id == 2 then answer = m end end
    until answer or uv.hrtime() - t0 > 20e9
    stdin:close()
    stdout:read_stop()
    stdout:close()
    stderr:close()
    proc:kill("sigterm")
    proc:close()
    uv.run("nowait")
    assert.is_table(answer, "no answer to tools/call")
    local lines = {}
    for _, m in ipairs(msgs) do
      if m.method == "notifications/progress" and m.params.message:match("^tools%.proc%.run: ")
      then
        lines[#lines + 1] = m.params.message
      end
    end
    assert.are.same({ "tools.proc.run: line one", "tools.proc.run: line two",
                      "tools.proc.run: tail" }, lines)
  end)
end)
