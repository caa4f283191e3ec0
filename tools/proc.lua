-- tools/proc.lua: proc.run, a command of the config's "commands" allowlist, run confined.
--
-- The allowlist is the config's "commands" section (load_opts.config.commands), an array
-- of entries {argv0, sub, deny_flags, env, net, timeout_ms, max_output}; only argv0 is
-- required. Without that section this file offers nothing. Each argv0 is resolved to an
-- absolute path when the file loads (a program that is not there is a load problem, not
-- a crash); nothing is allowed by default.
--
-- The command runs as libexec/tidepool-confine (found by require("tidepool.proc"), i.e.
-- engine/host/proc.c), spawned with luv on the engine's loop, so a command never blocks
-- another run or call. The helper gives it its own session and process group, rlimits,
-- no new privileges, Landlock (system directories read-only, the working tree writable,
-- TCP refused unless the entry has "net": true) and a seccomp filter, then execve's it
-- with argv only: there is never a shell. It reports what it applied on descriptor 3.
--
-- Working directory: with an engine workspace, `cwd` (default ".") is a directory inside
-- it and the workspace is what the command may write. Without one, `cwd` is refused and
-- each command runs in a fresh temporary directory, its only writable place, removed
-- when it ends.
--
-- Environment: only PATH (MINIMAL_PATH) and the entry's "env" map ("NAME": "value", or
-- "env:NAME" for a variable of tidepool's own environment, read at each run). The
-- script's `env` may set only names that the entry's "env" lists (its value replaces the
-- configured one).
--
-- Outcomes: a command that is not allowed raises tool.denied ("command_not_allowed: ...",
-- naming the closest rule); a program that cannot be executed raises tool.failed
-- ("not_found: ..."). A command that ran returns its result, a non-zero exit included;
-- a timeout (SIGTERM to the group, SIGKILL GRACE_MS later) or output past max_output
-- returns what was read, with error_kind "timeout" or "output_capped" and advice.
-- Output lines go to ctx.progress as they come (MCP progress notifications).

local load_opts = ...
local config = type(load_opts) == "table" and load_opts.config or nil
local entries_cfg = type(config) == "table" and config.commands or nil
if type(entries_cfg) ~= "table" then return {} end

local uv = require("luv")
local cproc = require("tidepool.proc")
local json = require("json")

local MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
local DEFAULT_TIMEOUT_MS = 30000
local DEFAULT_MAX_OUTPUT = 1024 * 1024
local GRACE_MS = 2000          -- SIGTERM .. SIGKILL
local DRAIN_MS = 1000          -- after the exit: how long pipes may stay open
local STDIN_MAX = 16 * 1024 * 1024
local AS_LIMIT = 4 * 1024 * 1024 * 1024   -- address space of the command, bytes
local FSIZE_LIMIT = 1024 * 1024 * 1024    -- largest file it may write
local NOFILE_LIMIT = 1024
local NPROC_LIMIT = 128        -- processes (and threads) it may have at once
local PROGRESS_LINES = 1000    -- output lines per call sent to ctx.progress
local PROGRESS_LINE_MAX = 400  -- bytes of a line sent to ctx.progress

local function nonnull(v)
  if v == json.null then return nil end
  return v
end

local function fail(msg, code)
  error({ message = msg, code = code }, 0)
end

-- ---- the allowlist -----------------------------------------------------------------

local entries, problems = {}, {}
for i, raw in ipairs(entries_cfg) do
  local argv0 = type(raw) == "table" and nonnull(raw.argv0)
  if type(argv0) ~= "string" or argv0 == "" then
    problems[#problems + 1] = ("commands[%d]: argv0 (a program name or absolute path) is "
      .. "required"):format(i - 1)
  else
    local abs, dir = cproc.resolve(argv0, os.getenv("PATH") or MINIMAL_PATH)
    local e = {
      argv0 = argv0, path = abs, dir = dir,
      missing = abs == nil and dir or nil,  -- the reason, for not_found
      sub = nonnull(raw.sub), deny_flags = nonnull(raw.deny_flags) or {},
      env = nonnull(raw.env) or {}, net = nonnull(raw.net) == true,
      timeout_ms = math.tointeger(nonnull(raw.timeout_ms)) or DEFAULT_TIMEOUT_MS,
      max_output = math.tointeger(nonnull(raw.max_output)) or DEFAULT_MAX_OUTPUT,
    }
    if abs == nil then
      problems[#problems + 1] = ("/commands/%d/argv0: %s (proc.run will answer not_found "
        .. "for it)"):format(i - 1, dir)
    end
    entries[#entries + 1] = e
  end
end
local warn = type(load_opts.warn) == "function" and load_opts.warn or function() end
for _, p in ipairs(problems) do warn(p) end

local helper, helper_err = cproc.helper()

-- The kernel never applies RLIMIT_NPROC to root: for root the helper holds the process
-- limit with a pids cgroup, which some machines cannot give (an unprivileged container
-- without a writable cgroup filesystem). Asked of the helper once, at load, so that the
-- operator reads it where the config's problems go, not the model in each result.
if helper and uv.getuid() == 0 then
  local p = io.popen(("'%s' --nproc %d -- /bin/true true 3>&1 2>/dev/null")
    :format(helper:gsub("'", "'\\''"), NPROC_LIMIT), "r")
  local said = p and p:read("a") or ""
  if p then p:close() end
  local cg = said:match("cgroup=(%S+)")
  if cg and cg:match("^/sys/fs/cgroup/") and not cg:find("..", 1, true) then
    uv.fs_rmdir(cg)  -- the probe's own group, empty once /bin/true is gone
  end
  if said:match("nproc=0") then
    warn("/commands: tidepool runs as root, which RLIMIT_NPROC does not bind, and no pids "
      .. "cgroup can be made here (no cgroup filesystem with the pids controller that root "
      .. "may write or mount): commands run without a process limit, and a fork bomb is "
      .. "stopped only by its timeout; run tidepool as another user, or give it a pids "
      .. "cgroup (a container's --pids-limit)")
  end
end

local function list_names()
  local names, seen = {}, {}
  for _, e in ipairs(entries) do
    if not seen[e.argv0] then seen[e.argv0] = true; names[#names + 1] = e.argv0 end
  end
  return table.concat(names, ", ")
end

-- Why entry e refuses args, or nil.
local function refusal(e, args)
  if type(e.sub) == "table" and #e.sub > 0 then
    local first = args[1]
    local ok = false
    for _, s in ipairs(e.sub) do if s == first then ok = true; break end end
    if not ok then
      local subs = table.concat(e.sub, "|")
      if first == nil then
        return ("%s is allowed with sub %s; no subcommand was given"):format(e.argv0, subs)
      end
      return ("%s is allowed with sub %s; '%s' is not one of them"):format(e.argv0, subs,
        first)
    end
  end
  for i, a in ipairs(args) do
    -- a long option as getopt_long reads it: its name before any "=value"
    local name = a:match("^(%-%-[^=]+)") or a
    for _, f in ipairs(e.deny_flags) do
      local hit = a == f or a:sub(1, #f + 1) == f .. "="
      -- a short flag with its value attached: -cfoo
      if not hit and #f == 2 and f:sub(1, 1) == "-" and f ~= "--" then
        hit = a:sub(1, 2) == f and a:sub(2, 2) ~= "-"
      end
      -- getopt_long takes any unambiguous prefix of a long option for it, down to one
      -- letter (--e, --ex, --exe for --exec, with or without =value): every prefix of a
      -- denied long flag is denied (one that the program would find ambiguous is refused
      -- by it anyway)
      if not hit and f:sub(1, 2) == "--" and #f > 2 and #name > 2 and #name < #f
         and name:sub(1, 2) == "--" and f:sub(1, #name) == name then
        hit = true
      end
      if hit then
        return ("%s refuses the flag %s (args[%d] = '%s')"):format(e.argv0, f, i, a)
      end
    end
  end
end

-- The entry that allows cmd with args, or raises command_not_allowed / not_found.
local function match(cmd, args)
  local closest
  for _, e in ipairs(entries) do
    if e.argv0 == cmd or (e.path ~= nil and e.path == cmd) then
      local why = refusal(e, args)
      if not why then
        if e.path == nil then
          fail(("not_found: %s. Advice: the program is not installed on the host; use "
            .. "another command of the allowlist (%s)."):format(e.missing, list_names()),
            "tool.failed")
        end
        return e
      end
      closest = closest or why
    end
  end
  if closest then
    fail(("command_not_allowed: %s. Advice: change the arguments to fit the rule, or ask "
      .. "the operator to extend the \"commands\" config."):format(closest), "tool.denied")
  end
  fail(("command_not_allowed: '%s' is not in the commands allowlist (allowed: %s). "
    .. "Advice: use one of those; there is no shell, so pipes and redirections must be "
    .. "done in Lua."):format(cmd, list_names()), "tool.denied")
end

-- The command's environment, as "NAME=value" strings.
local function environment(e, script_env)
  local vars = { PATH = MINIMAL_PATH }
  for k, v in pairs(e.env) do
    if type(v) == "string" then
      local from = v:match("^env:(.+)$")
      if from then v = os.getenv(from) end
      if v ~= nil then vars[k] = v end
    end
  end
  for k, v in pairs(script_env or {}) do
    if e.env[k] == nil then
      local names = {}
      for n in pairs(e.env) do names[#names + 1] = n end
      table.sort(names)
      fail(("command_not_allowed: env.%s: %s does not take that variable from scripts "
        .. "(it takes: %s). Advice: drop env.%s."):format(k, e.argv0,
        #names > 0 and table.concat(names, ", ") or "none", k), "tool.denied")
    end
    vars[k] = v
  end
  local list = {}
  for k, v in pairs(vars) do list[#list + 1] = k .. "=" .. v end
  table.sort(list)
  return list
end

-- ---- running -------------------------------------------------------------------------

local function parse_report(text)
  local r = {}
  for k, v in text:gmatch("(%w+)=(%S+)") do r[k] = v end
  return r
end

local function close(h)
  if h and not h:is_closing() then h:close() end
end

-- One try at removing the command's pids cgroup (the kernel refuses while a process is
-- left in it): true when it is gone; what is left in it is killed.
local function cgroup_gone(path)
  if not path or not path:match("^/sys/fs/cgroup/[%w%-/_.]+$") or path:find("..", 1, true) then
    return true
  end
  if uv.fs_rmdir(path) then return true end
  local f = io.open(path .. "/cgroup.procs")
  if not f then return true end
  for pid in f:lines() do
    local n = math.tointeger(tonumber(pid))
    if n and n > 0 then uv.kill(n, "sigkill") end
  end
  f:close()
  return false
end

-- Removes it inside the call, trying for up to about a second, so that a program that
-- exits right after the run leaves nothing behind.
local function remove_cgroup(ctx, path)
  for _ = 1, 50 do
    if cgroup_gone(path) then return end
    ctx.sleep(20)
  end
end

-- The same after the call was cancelled (the run ended): on timers. What an engine that
-- exits meanwhile leaves, the next command's helper removes (tidepool-confine.c).
local function remove_cgroup_later(path, tries)
  if cgroup_gone(path) or tries <= 0 then return end
  local t = uv.new_timer()
  t:start(20, 0, function()
    t:close()
    remove_cgroup_later(path, tries - 1)
  end)
end

-- Runs the command (spec: path, argv, env, cwd, rw, ro, net, stdin, timeout_ms,
-- max_output) and waits for it through ctx; returns the result table.
local function run(spec, ctx)
  local started = uv.hrtime()
  local out, err = {}, {}
  local kept, capped = 0, false
  local report = {}
  local progress = type(ctx.progress) == "function" and ctx.progress or nil
  local sent = 0
  local partial = { stdout = "", stderr = "" }

  local function emit(stream, data)
    if not progress or sent >= PROGRESS_LINES then return end
    local text = partial[stream] .. data
    for line in text:gmatch("([^\n]*)\n") do
      if sent >= PROGRESS_LINES then break end
      sent = sent + 1
      pcall(progress, line:sub(1, PROGRESS_LINE_MAX))
    end
    partial[stream] = text:match("([^\n]*)$"):sub(1, PROGRESS_LINE_MAX)
  end

  local args = { "--rw", spec.rw, "--nproc", tostring(NPROC_LIMIT),
                 "--cpu", tostring(math.ceil(spec.timeout_ms / 1000) + 1),
                 "--as", tostring(AS_LIMIT), "--fsize", tostring(FSIZE_LIMIT),
                 "--nofile", tostring(NOFILE_LIMIT) }
  if spec.ro then args[#args + 1] = "--ro"; args[#args + 1] = spec.ro end
  if spec.net then args[#args + 1] = "--net" end
  args[#args + 1] = "--"
  args[#args + 1] = spec.path
  for _, a in ipairs(spec.argv) do args[#args + 1] = a end

  local stdin, ierr = cproc.input(spec.stdin or "")
  if not stdin then fail(ierr, "tool.failed") end
  local stdout, stderr, rep = uv.new_pipe(), uv.new_pipe(), uv.new_pipe()
  local proc, pid, timer, killer, drain
  local exited, code, signal = false, nil, nil
  local ended = {}  -- stream name -> true once read to its end (or given up)
  local timed_out = false
  local done_cb

  local function finish_if_done()
    if exited and ended.stdout and ended.stderr and ended.report and done_cb then
      local cb = done_cb
      done_cb = nil
      close(drain)
      cb(true)
    end
  end

  local function reader(which, buf)
    return function(rerr, data)
      if ended[which] then return end
      if rerr or data == nil then
        if which ~= "report" and partial[which] ~= "" then emit(which, "\n") end
        ended[which] = true
        finish_if_done()
        return
      end
      if which == "report" then report[#report + 1] = data; return end
      emit(which, data)
      local room = spec.max_output - kept
      if #data > room then
        capped = true
        data = data:sub(1, math.max(room, 0))
      end
      if #data > 0 then
        kept = kept + #data
        buf[#buf + 1] = data
      end
    end
  end

  -- The command's group: SIGKILL when the call is cancelled or the run ends.
  local guard = { closed = false }
  function guard.is_closing() return guard.closed end
  function guard.close()
    guard.closed = true
    if pid and not exited then uv.kill(-pid, "sigkill") end
    close(timer)
    close(killer)
    close(drain)
    close(stdout)
    close(stderr)
  end

  local started_ok, perr = ctx.await(function(resume)
    done_cb = resume
    proc, pid = uv.spawn(helper, {
      args = args, env = spec.env, cwd = spec.cwd,
      stdio = { stdin, stdout, stderr, rep },
    }, function(c, s)
      exited, code, signal = true, c, s
      close(timer)
      close(killer)
      close(proc)
      -- what the command left in its group goes with it, so the pipes reach their end
      uv.kill(-pid, "sigkill")
      if guard.closed then  -- cancelled: no one waits for the result
        for _, p in ipairs({ stdout, stderr, rep }) do close(p) end
        remove_cgroup_later(parse_report(table.concat(report)).cgroup, 50)
        return
      end
      if not (ended.stdout and ended.stderr and ended.report) and not guard.closed then
        drain = uv.new_timer()
        drain:start(DRAIN_MS, 0, function()
          close(drain)
          ended.stdout, ended.stderr, ended.report = true, true, true
          finish_if_done()
        end)
      end
      finish_if_done()
    end)
    uv.fs_close(stdin)  -- the command has its copy
    if not proc then
      done_cb = nil
      resume(false, pid)
      return
    end
    ctx.track(guard)
    stdout:read_start(reader("stdout", out))
    stderr:read_start(reader("stderr", err))
    rep:read_start(reader("report", nil))
    timer = uv.new_timer()
    uv.update_time()  -- the loop's clock may be stale: timers count from it
    timer:start(spec.timeout_ms, 0, function()
      close(timer)
      if exited then return end
      timed_out = true
      uv.kill(-pid, "sigterm")
      killer = uv.new_timer()
      killer:start(GRACE_MS, 0, function()
        close(killer)
        if not exited then uv.kill(-pid, "sigkill") end
      end)
    end)
  end)
  guard.closed = true
  for _, p in ipairs({ stdout, stderr, rep }) do close(p) end
  if started_ok ~= true then
    fail(("cannot start %s: %s"):format(tostring(helper), tostring(perr)), "tool.failed")
  end
  local rp = parse_report(table.concat(report))
  remove_cgroup(ctx, rp.cgroup)
  if rp.exec then
    fail(("not_found: %s could not be executed (%s). Advice: the program is missing or "
      .. "not executable on the host; use another command of the allowlist (%s).")
      :format(spec.path, rp.exec, list_names()), "tool.failed")
  end
  if rp.error then
    fail(("the confinement of %s could not be applied (%s); the command did not run")
      :format(spec.argv0, rp.error), "tool.failed")
  end
  if rp.seccomp == nil then  -- the helper died before it said what it applied
    fail(("%s ended (%s %s) before confirming the confinement of %s"):format(helper,
      signal ~= 0 and "signal" or "exit status", signal ~= 0 and signal or code, spec.argv0),
      "tool.failed")
  end
  local res = {
    exit_code = (signal == nil or signal == 0) and code or json.null,
    signal = (signal ~= nil and signal ~= 0) and signal or json.null,
    stdout = table.concat(out), stderr = table.concat(err),
    truncated = capped, timed_out = timed_out,
    duration_ms = math.floor((uv.hrtime() - started) / 1e6 + 0.5),
    sandbox = {
      landlock_abi = (tonumber(rp.landlock) or 0) > 0 and tonumber(rp.landlock) or false,
      seccomp = rp.seccomp == "1",
      nproc = rp.nproc == "cgroup" and "cgroup" or rp.nproc == "rlimit" and "rlimit" or false,
      net = spec.net,
    },
  }
  if timed_out then
    res.error_kind = "timeout"
    res.advice = ("the command ran past %d ms and was stopped (SIGTERM to its process "
      .. "group, SIGKILL %d ms later); stdout and stderr hold what it wrote until then. "
      .. "Give it a larger timeout_ms (at most the entry's), or less work."):format(
      spec.timeout_ms, GRACE_MS)
  elseif capped then
    res.error_kind = "output_capped"
    res.advice = ("stdout and stderr together were cut at %d bytes (max_output); the "
      .. "command ran to its end. Ask for less output (a narrower command, a filter "
      .. "argument) or a larger max_output, up to the entry's."):format(spec.max_output)
  end
  return res
end

local function clamp(want, limit, name, e)
  if want == nil then return limit end
  if want > limit then
    fail(("%s = %d is above %s's limit of %d"):format(name, want, e.argv0, limit),
      "tool.invalid_input")
  end
  return want
end

local max_timeout = DEFAULT_TIMEOUT_MS
for _, e in ipairs(entries) do
  if e.timeout_ms > max_timeout then max_timeout = e.timeout_ms end
end

local function allowed_text()
  if #entries == 0 then return "Nothing is allowed here." end
  local parts = {}
  for _, e in ipairs(entries) do
    local t = e.argv0
    if type(e.sub) == "table" and #e.sub > 0 then
      t = t .. " (" .. table.concat(e.sub, "|") .. ")"
    end
    parts[#parts + 1] = t
  end
  return "Allowed here: " .. table.concat(parts, ", ") .. "."
end

return {
  {
    name = "proc.run",
    description = "Run an allowed command (argv only, never a shell) and get its output. "
      .. allowed_text() .. " The command runs confined: its working directory is inside "
      .. "the workspace (without one, a fresh temporary directory), which is all it may "
      .. "write; no network unless allowed. Returns "
      .. "{exit_code, signal, stdout, stderr, truncated, timed_out, duration_ms, sandbox}, "
      .. "with error_kind and advice after a timeout or when output was capped. A "
      .. "command outside the allowlist fails with tool.denied (command_not_allowed).",
    timeout_ms = max_timeout + GRACE_MS + DRAIN_MS + 2000,
    input = {
      type = "object",
      properties = {
        cmd = { type = "string", minLength = 1, maxLength = 4096,
                description = "The program, as the allowlist names it (e.g. \"git\")." },
        args = { type = "array", items = { type = "string", maxLength = 131072 },
                 maxItems = 4096, default = {}, description = "Its arguments." },
        cwd = { type = "string", minLength = 1, maxLength = 4096, default = ".",
                description = "Working directory, relative to the workspace root." },
        env = { type = "object", additionalProperties = { type = "string" },
                description = "Environment variables, only those the command's entry " ..
                  "lists." },
        stdin = { type = "string", maxLength = STDIN_MAX, description = "Text to feed " ..
                  "on standard input." },
        timeout_ms = { type = "integer", minimum = 1, description = "Time limit; at " ..
                       "most the entry's (default 30000)." },
        max_output = { type = "integer", minimum = 0, description = "Bytes of stdout " ..
                       "plus stderr kept; at most the entry's (default 1 MiB)." },
      },
      required = { "cmd" },
      additionalProperties = false,
    },
    output = {
      type = "object",
      properties = {
        exit_code = { type = { "integer", "null" },
                      description = "Exit status; null when a signal ended it." },
        signal = { type = { "integer", "null" }, description = "The signal that ended it." },
        stdout = { type = "string" },
        stderr = { type = "string" },
        truncated = { type = "boolean", description = "Output was cut at max_output." },
        timed_out = { type = "boolean" },
        duration_ms = { type = "integer" },
        error_kind = { type = "string", enum = { "timeout", "output_capped" } },
        advice = { type = "string", description = "What to do about error_kind." },
        sandbox = {
          type = "object",
          description = "The protections applied.",
          properties = {
            landlock_abi = { type = { "integer", "boolean" },
                             description = "Landlock ABI version, false without Landlock." },
            seccomp = { type = "boolean" },
            nproc = { type = { "string", "boolean" },
                      description = "How processes are capped: cgroup, rlimit or false." },
            net = { type = "boolean", description = "Network allowed." },
          },
        },
      },
      required = { "exit_code", "signal", "stdout", "stderr", "truncated", "timed_out",
                   "duration_ms", "sandbox" },
    },
    handler = function(a, ctx)
      local argv = a.args or {}
      -- a C string ends at its first NUL: the program would see another argument
      for i, v in ipairs(argv) do
        if v:find("\0", 1, true) then
          fail(("args[%d] holds a NUL byte, which no program argument can"):format(i),
            "tool.invalid_input")
        end
      end
      for k, v in pairs(a.env or {}) do
        if v:find("\0", 1, true) then
          fail(("env.%s holds a NUL byte, which no environment variable can"):format(k),
            "tool.invalid_input")
        end
      end
      local e = match(a.cmd, argv)
      if helper == nil then
        fail("proc.run cannot confine commands here: " .. tostring(helper_err), "tool.unavailable")
      end
      local ws = ctx.workspace
      local cwd, rw, tmp
      -- the temporary directory goes when the handler ends, even when the call is
      -- cancelled (its coroutine is closed then)
      local _ <close> = setmetatable({}, { __close = function()
        if tmp then cproc.rmtree(tmp) end
      end })
      if type(ws) == "string" and ws ~= "" then
        local msg
        cwd, msg = cproc.beneath(ws, a.cwd or ".")
        if not cwd then
          fail("cwd: " .. msg .. " (a directory inside the workspace is expected)",
            "tool.invalid_input")
        end
        rw = cproc.beneath(ws, ".")
      else
        if a.cwd ~= nil and a.cwd ~= "." then
          fail("cwd: this engine has no workspace, so commands run in a fresh temporary " ..
            "directory and cwd cannot be chosen", "tool.invalid_input")
        end
        local msg
        tmp, msg = cproc.mkdtemp()
        if not tmp then fail(msg, "tool.failed") end
        cwd, rw = tmp, tmp
      end
      local full = { e.argv0 }  -- argv[0] as the allowlist names it (busybox-style dispatch)
      for i, v in ipairs(argv) do full[i + 1] = v end
      local spec = {
        path = e.path, argv0 = e.argv0, argv = full, env = environment(e, a.env),
        cwd = cwd, rw = rw, ro = e.dir, net = e.net, stdin = a.stdin,
        timeout_ms = clamp(a.timeout_ms, e.timeout_ms, "timeout_ms", e),
        max_output = clamp(a.max_output, e.max_output, "max_output", e),
      }
      local t0 = ctx.span_start and ctx.span_start()
      if not t0 then return run(spec, ctx) end
      local ok, res = pcall(run, spec, ctx)  -- the command's span, under the call's
      ctx.span("command " .. e.argv0, t0, ok and type(res) == "table" and res.exit_code == 0,
               not ok and (type(res) == "table" and res.code or "tool.failed") or nil)
      if not ok then error(res, 0) end
      return res
    end,
  },
}
