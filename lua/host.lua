-- host.lua: the runtime of the engine's host Lua state (trusted; see engine/host/host.c,
-- which opens it and builds E, host_call.c and host_handler.c, which run the calls).
--
-- It loads plugin files and keeps each call's record: its handler's coroutine, its ctx,
-- its box (the call as C sees it) and the handles its ctx opened. host_handler.c drives the
-- common call itself: it takes an idle record from its pool, resumes the record's
-- coroutine with the handler and the argument tree, and when the handler returns at
-- once, converts the result and completes the call in C; none of this file runs then.
-- Everything else comes here (M.resumed), and ends the call so:
--   return value       -> E.complete(box, true, value)     (result schema checked in C)
--   error(...)         -> E.complete(box, false, "file:line: message")   tool.failed
--   error{code=, message=} with a tool.* code -> that code and message
-- A handler waits only through ctx (ctx.sleep, ctx.await): its coroutine yields WAIT and
-- a luv callback resumes it later. Everything a call's ctx opened (timers, handles given
-- to ctx.track) is closed when the call ends, however it ends, so nothing of it runs
-- afterwards.
--
-- A record goes back to the C pool only when its handler returned without waiting,
-- tracking a handle or handing a function to luv (E.claim: records that did may be
-- reachable from a callback that outlives the call), and never when its handler raised,
-- timed out, was cancelled or yielded on its own. Reuse cannot carry what a handler
-- wrote into ctx or ctx's metatable (C wipes them when the handler returns); a
-- coroutine left with a debug hook is not taken again. ctx's per-call fields (run_id,
-- call_id, tool, deadline_ms) are read from the call's box when asked for, so a call
-- costs no Lua here. A ctx is valid during its call only: one a handler keeps past its
-- call (in a global) may reach a later call (plugins are trusted code; they must not
-- keep ctx).
--
-- E (host.c): add_tool(spec) -> true | nil, msg; complete(box, ok, value [, code]);
-- log(box, text); progress(box, text); annotate(); deadline_ms(box) -> ms | nil;
-- charge(box, n) -> true | nil, msg (bytes the call keeps, held until it ends);
-- decode(box, text) -> value (json.decode charged to the call's run); peek_id(text);
-- field(box, k) -> run_id, call_id, tool or deadline_ms of the box's call (nil when it
-- has none); fs_quota(box) -> left, quota | nothing; fs_charge(box, bytes);
-- workspace() -> dir | nil; workspace_max() -> bytes;
-- config(section) -> JSON text of that section of the engine's config | nil;
-- new_box(rec, co) -> an empty call box of record rec; body(ctx, mt) -> the function of a
-- record's coroutine; claim(box): the record is not reused; DONE, what that coroutine
-- yields with its handler's result; resume(box, co, ...) -> ok, value, result, held_ms,
-- late (coroutine.resume, timed).
local E = ...
local E_resume, E_complete, E_claim, E_field = E.resume, E.complete, E.claim, E.field

local uv = require("luv")
local json = require("json")  -- also a global of this state (host.c), named for luacheck

local M = {}

local WAIT = setmetatable({}, { __name = "tidepool.wait" })
local DONE = E.DONE  -- the handler returned: its coroutine yields DONE, result

local co_create, co_running = coroutine.create, coroutine.running

-- The engine's workspace as ctx shows it (set by host.c when it changes).
local ws_dir, ws_max = nil, nil

-- Callbacks -> the record of the call whose handler made or registered them, so that an
-- error raised in one reaches that call (callback_error) instead of stderr.
local owners = setmetatable({}, { __mode = "k" })
local co_rec = setmetatable({}, { __mode = "k" })  -- handler coroutine -> record

-- Every handle luv gave out in this state, so shutdown can close them before the state
-- goes (an active handle would otherwise call into a closed state).
local all_handles = setmetatable({}, { __mode = "k" })

-- luv's functions and handle methods are wrapped: functions handed to them from a
-- handler's coroutine are claimed for its call, and new handles are remembered.
local function claim(...)
  local rec = co_rec[co_running()]
  if rec then
    E_claim(rec.box)
    for i = 1, select("#", ...) do
      local v = select(i, ...)
      if type(v) == "function" then owners[v] = rec end
    end
  end
end

local wrapped = setmetatable({}, { __mode = "k" })
local function wrap(name, f)
  local w
  if name:match("^new_") or name == "spawn" then
    w = function(...)
      claim(...)
      local h, a, b = f(...)
      if type(h) == "userdata" then all_handles[h] = true end
      return h, a, b
    end
  else
    w = function(...)
      claim(...)
      return f(...)
    end
  end
  wrapped[w] = true
  return w
end

for name, f in pairs(uv) do
  if type(f) == "function" then uv[name] = wrap(name, f) end
end
for k, mt in pairs(debug.getregistry()) do
  if type(k) == "string" and k:match("^uv_") and type(mt) == "table"
     and type(rawget(mt, "__index")) == "table" then
    local methods = rawget(mt, "__index")
    for name, f in pairs(methods) do
      if type(f) == "function" and not wrapped[f] then methods[name] = wrap(name, f) end
    end
  end
end

-- print in the host state goes to the engine's logger (tp_engine_on_log: the command
-- line shows it on stderr): stdout belongs to the program (--json).
local E_emit = E.emit
function print(...)  -- luacheck: ignore 121
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  E_emit("info", "plugin", table.concat(parts, "\t"))
end

local function close_handle(h)
  pcall(function()
    if not h:is_closing() then h:close() end
  end)
end

local function close_handles(rec)
  local hs = rec.handles
  if next(hs) == nil then return end
  rec.handles = {}
  for h in pairs(hs) do close_handle(h) end
end

-- "file:line: " of the innermost plugin frame of thread co (or of this thread when co
-- is nil), from level on, for errors raised without a position.
local function where(co, level)
  for l = level, level + 40 do
    local info
    if co then info = debug.getinfo(co, l, "Sl") else info = debug.getinfo(l, "Sl") end
    if not info then break end
    if info.what ~= "C" and info.currentline and info.currentline > 0
       and info.source ~= "=lua/host.lua" then
      return info.short_src .. ":" .. info.currentline .. ": "
    end
  end
  return ""
end

local function has_position(msg)
  return msg:match("^[^\n]-:%d+: ") ~= nil
end

-- "/srv/x/tools/kv.lua:25: what" -> "kv.lua:25: what": a message a model reads names the
-- plugin file, never the host's folders (the tool's name comes before it: "tools.kv.get
-- failed: ...").
local function without_dirs(msg)
  return (msg:gsub("^[^\n]*/([^/\n]-:%d+: )", "%1", 1))
end

-- The message and code of an error raised by a handler running in co. A string raised
-- without a position (error(msg, 0)) stays as its author wrote it.
local function describe_error(err, co)
  if type(err) == "table" then
    local code, msg = rawget(err, "code"), rawget(err, "message")
    if type(msg) == "string" then
      if type(code) ~= "string" or not code:match("^tool%.") then code = nil end
      return without_dirs(msg), code
    end
  end
  if type(err) == "string" then return without_dirs(err) end
  return without_dirs(where(co, 0) .. "(error object is a " .. type(err) .. " value)")
end

local function finish(rec, ok, value, code)
  if rec.done then return end
  rec.done = true
  rec.wait = nil
  close_handles(rec)
  E_complete(rec.box, ok, value, code)
end

-- Acts on how a resume of the handler's coroutine stopped (E.resume's results; C
-- calls it for anything but a handler that returned at once). The time a resume holds
-- the thread is the call's: a handler that blocks (sleeps in C, loops in Lua) past its
-- call's deadline ends the call with tool.timeout, and its coroutine is closed (its
-- to-be-closed variables run; it never resumes).
function M.resumed(rec, ok, a, result, held_ms, late)
  local co = rec.co
  if late and not rec.done and not rec.cancelled then
    finish(rec, false, ("its handler held the engine for %.0f ms, past the call's time "
      .. "limit, without waiting (it blocks in C or loops in Lua instead of waiting with "
      .. "ctx.sleep, ctx.await or luv)"):format(held_ms), "tool.timeout")
    coroutine.close(co)  -- suspended, or dead by the stopping hook: <close> variables run
    return
  end
  if not ok then
    local msg, code = describe_error(a, co)
    coroutine.close(co)  -- a coroutine dead by an error keeps its <close> variables open
    finish(rec, false, msg, code)
  elseif a == DONE then
    finish(rec, true, result)
  elseif a ~= WAIT then
    finish(rec, false, "the handler yielded without waiting on anything (wait with "
      .. "ctx.sleep or ctx.await)")
  end
end
local resumed = M.resumed

-- Resumes the handler's coroutine with the given values when the call is still on,
-- checking first that it was not woken past its deadline (before the engine saw it).
local function step(rec, ...)
  if rec.done or rec.cancelled then return end
  local left = E.deadline_ms(rec.box)
  if left ~= nil and left <= 0 then
    finish(rec, false, "", "tool.timeout")  -- the engine's message names the limit
    coroutine.close(rec.co)
    return
  end
  return resumed(rec, E_resume(rec.box, rec.co, ...))
end

-- Waits for the callback handed to start(resume); returns the values it got. The
-- callback may come at once (before the yield) or never; once the wait is over, later
-- calls of it are ignored.
local function wait(rec, what, start)
  if coroutine.running() ~= rec.co then
    error(what .. " must be called from the handler itself, not from another coroutine", 3)
  end
  local token = {}
  local yielded, early = false, nil
  rec.wait = token
  E_claim(rec.box)  -- resume may be called after the call: the record is not reused
  local function resume(...)
    if rec.wait ~= token or rec.done or rec.cancelled then return end
    rec.wait = nil
    if yielded then step(rec, ...) else early = table.pack(...) end
  end
  owners[resume] = rec
  local ok, err = pcall(start, resume)
  if not ok then
    rec.wait = nil
    error(err, 0)
  end
  if early then return table.unpack(early, 1, early.n) end
  yielded = true
  return coroutine.yield(WAIT)
end

-- A record's ctx. ctx itself is an empty table: what it shows is read through its
-- metatable from the record's functions (made once per record) and, for the per-call
-- fields, from the call's box, so whatever a handler writes into ctx (even with rawset)
-- lands in ctx itself, and C wipes it (and restores a metatable the handler
-- changed) when the handler returns.
local function make_ctx(rec)
  local fns = {}

  -- The run's file-write quota (--fs-quota): bytes left and the whole quota, or nil when
  -- the run has none. A plugin that writes files charges what it wrote with
  -- ctx.charge_writes, as the fs tools do.
  function fns.write_quota()
    return E.fs_quota(rec.box)
  end

  function fns.charge_writes(bytes)
    if math.type(bytes) ~= "integer" or bytes < 0 then
      error("ctx.charge_writes: bytes must be an integer >= 0", 2)
    end
    E.fs_charge(rec.box, bytes)
  end

  -- Waits ms milliseconds on a luv timer; other runs and calls go on meanwhile.
  function fns.sleep(ms)
    if type(ms) ~= "number" or ms ~= ms or ms < 0 then
      error("ctx.sleep: ms must be a number >= 0", 2)
    end
    local t = uv.new_timer()
    rec.handles[t] = true
    uv.update_time()  -- the loop's clock may be stale: the loop was idle during the run
    wait(rec, "ctx.sleep", function(resume) t:start(math.ceil(ms), 0, resume) end)
    rec.handles[t] = nil
    close_handle(t)
  end

  -- Calls start(cb) and waits until cb is called; returns cb's arguments.
  function fns.await(start)
    if type(start) ~= "function" then error("ctx.await: expects function(cb) ... end", 2) end
    return wait(rec, "ctx.await", start)
  end

  -- An HTTP request under the config's egress policy (engine/host/http.c): waits for the
  -- answer and returns {status, headers, body, truncated, url}, or raises {code, message}
  -- (tool.failed, tool.timeout, tool.denied) so the call fails with that code. The request
  -- is cancelled when the call ends first.
  local HTTP_OPTS = { "method", "url", "headers", "body", "timeout_ms", "max_bytes" }
  function fns.http(opts)
    if type(opts) ~= "table" then
      error("ctx.http: expects a table {method = \"GET\", url = \"https://...\", ...}", 2)
    end
    local o = {}
    for _, k in ipairs(HTTP_OPTS) do o[k] = rawget(opts, k) end
    o.traceparent = E.traceparent(rec.box)
    -- the body comes in chunks, each charged to the run as it arrives (and once more
    -- when they are joined), so parallel fetches stop at the run's memory limit
    local chunks, over = {}, nil
    local req
    local res, err = wait(rec, "ctx.http", function(resume)
      o.on_data = function(chunk)
        if over then return end
        local ok, why = E.charge(rec.box, #chunk)
        if not ok then
          over = why
          req:cancel()
          resume(nil, { code = "tool.failed", message = "ctx.http: the body of " ..
            tostring(o.url) .. ": " .. tostring(why) })
          return
        end
        chunks[#chunks + 1] = chunk
      end
      req = require("tidepool.http").request(o, resume)
      rec.handles[req] = true
    end)
    rec.handles[req] = nil
    if res == nil then error(err, 0) end
    local size = 0
    for i = 1, #chunks do size = size + #chunks[i] end
    local ok, why = E.charge(rec.box, size)
    if not ok then
      error({ code = "tool.failed", message = "ctx.http: the body of " .. tostring(o.url)
        .. ": " .. tostring(why) }, 0)
    end
    res.body = table.concat(chunks)
    return res
  end

  -- json.decode(text) charged to the run's memory: the tree as it is built, and the value
  -- for as long as the call lasts. For data from outside (an upstream server's answer, an
  -- HTTP body) that may be large; raises when the run cannot hold it (its verdict is then
  -- limit.memory) or the text is not JSON.
  -- The W3C traceparent of this call's span (docs/operations.md), for the work the call
  -- causes to name as its parent: nil when the run is not traced or the config keeps
  -- context in. ctx.http sends it on by itself; upstream requests carry it in _meta.
  function fns.traceparent()
    return E.traceparent(rec.box)
  end

  -- A span under this call's, for work it causes (a command): t0 = ctx.span_start(), then
  -- ctx.span(name, t0, ok, code) when it ends. Nothing when the run is not traced.
  function fns.span_start() return E.span_start() end
  function fns.span(name, t0, ok, code)
    local parent = E.traceparent(rec.box)
    if parent then E.span(parent, tostring(name), t0, ok, code) end
  end

  function fns.decode(text)
    if type(text) ~= "string" then error("ctx.decode: expects a string of JSON text", 2) end
    return E.decode(rec.box, text)
  end

  -- A luv handle to close when the call ends (completed, failed, timed out, cancelled).
  function fns.track(h)
    E_claim(rec.box)
    rec.handles[h] = true
    return h
  end

  -- A progress report while the call works (an upstream server's progress, proc.run's
  -- output lines): message, and progress and total when there are numbers (total may be
  -- nil). It reaches tp_run_on_progress as "message (progress/total)"; tidepool mcp sends
  -- it as a progress notification "tools.<tool>: ..." of the run_lua request. Not kept in
  -- the run's logs; nothing happens when no one listens or the call is over.
  function fns.progress(message, progress, total)
    local text = message == nil and "" or tostring(message)
    if type(progress) == "number" then
      local nums = type(total) == "number" and ("%g/%g"):format(progress, total)
                   or ("%g"):format(progress)
      text = text == "" and nums or text .. " (" .. nums .. ")"
    end
    E.progress(rec.box, text)
  end

  -- A line in the run's logs, prefixed with the tool's name.
  function fns.log(...)
    local tool = E_field(rec.box, "tool")
    if tool == nil then return end  -- the call is over
    local n = select("#", ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    E.log(rec.box, "[" .. tool .. "] " .. table.concat(parts, "\t"))
  end

  setmetatable(fns, {
    __index = function(_, k)
      if k == "workspace" then return ws_dir end
      if k == "workspace_max" then return ws_dir and ws_max or nil end
      return E_field(rec.box, k)  -- run_id, call_id, tool, deadline_ms, tool_bytes, memory
    end,
  })
  rec.mt = { __index = fns }
  rec.ctx = setmetatable({}, rec.mt)
end

-- ---- called from C (host_handler.c) -------------------------------------------------

-- A new record (the C pool had none idle); returns its box. Its coroutine runs
-- host_call.c's body: one handler per resume from C, yielding DONE, result after each.
function M.new_record()
  local rec = { handles = {}, done = false, cancelled = false }
  make_ctx(rec)
  rec.co = co_create(E.body(rec.ctx, rec.mt))
  rec.box = E.new_box(rec, rec.co)
  co_rec[rec.co] = rec
  return rec.box
end

-- The engine's workspace changed (host_handler.c): what ctx shows from now on.
function M.set_workspace(dir, max)
  ws_dir, ws_max = dir, max
end

-- The call is over for the engine (box emptied already); C closes the coroutine.
function M.cancel(rec)
  rec.cancelled = true
  rec.wait = nil
  close_handles(rec)
end

-- An error escaped a luv callback; true when it went to a call.
function M.callback_error(fn, msg)
  local rec = owners[fn]
  if rec and not rec.done and not rec.cancelled then
    finish(rec, false, tostring(msg))
    return true
  end
  return false
end

-- ---- upstream MCP servers (lua/upstream.lua; host_load.c's tp__host_upstream) --------

local upstream
function M.upstream_start()
  upstream = upstream or require("tidepool.upstream")
  upstream.start(M.config().mcpServers)
end
function M.upstream_pending() return upstream ~= nil and upstream.pending() end
function M.upstream_all_listed() return upstream ~= nil and upstream.all_listed() end
function M.upstream_problems() return upstream and upstream.problems() or {} end
function M.upstream_late(ms) if upstream then upstream.late(ms) end end
function M.upstream_pending_start() return upstream ~= nil and upstream.pending_start() end
function M.upstream_late_start() if upstream then upstream.late_start() end end
function M.upstream_stop() if upstream then upstream.stop() end end
function M.upstream_stopping() return upstream ~= nil and upstream.stopping() end

function M.shutdown()
  for h in pairs(all_handles) do close_handle(h) end
end

-- ---- plugins ------------------------------------------------------------------------------

local FIELDS = { name = true, description = true, input = true, output = true,
                 handler = true, timeout_ms = true }
local FIELD_LIST = "name, description, input, output, handler, timeout_ms"

-- The line of a tool's definition: where its name is written, else where its handler
-- starts, else 1.
local function tool_line(src, path, t)
  if type(t) == "table" then
    local name = rawget(t, "name")
    if type(name) == "string" and name ~= "" then
      local esc = name:gsub("%p", "%%%0")
      local at = src:find("name%s*=%s*[\"']" .. esc .. "[\"']")
      if at then
        local _, nl = src:sub(1, at):gsub("\n", "")
        return nl + 1
      end
    end
    local h = rawget(t, "handler")
    if type(h) == "function" then
      local info = debug.getinfo(h, "S")
      if info.source == "@" .. path and info.linedefined > 0 then return info.linedefined end
    end
  end
  return 1
end

-- What is wrong with a tool table, or nil.
local function check_tool(t)
  local name = rawget(t, "name")
  if type(name) ~= "string" or name == "" then
    return "a tool without a name (name = \"group.tool\")"
  end
  for k in pairs(t) do
    if not FIELDS[k] then
      return ("tool %s: unknown field '%s' (the fields are %s)"):format(name, tostring(k),
        FIELD_LIST)
    end
  end
  if type(rawget(t, "handler")) ~= "function" then
    return ("tool %s: no handler (handler = function(args, ctx) ... end)"):format(name)
  end
  local d = rawget(t, "description")
  if d ~= nil and type(d) ~= "string" then
    return ("tool %s: description must be a string"):format(name)
  end
  for _, f in ipairs({ "input", "output" }) do
    local s = rawget(t, f)
    if s ~= nil and type(s) ~= "table" and type(s) ~= "string" then
      return ("tool %s: %s must be a JSON Schema, as a table or JSON text"):format(name, f)
    end
  end
  local tmo = rawget(t, "timeout_ms")
  if tmo ~= nil and (type(tmo) ~= "number" or tmo ~= tmo or tmo <= 0) then
    return ("tool %s: timeout_ms must be a number > 0"):format(name)
  end
end

-- The engine's config (tp_engine_configure) as plugins see it at load: a table whose
-- fields are the sections that have been given (mcpServers, http, commands, ...), each
-- decoded from JSON (json.null for a null), read fresh for each load.
local CONFIG_SECTIONS = { "limits", "tools", "workspace", "mcpServers", "http", "commands",
                          "policy" }
function M.config()
  local cfg = {}
  for _, name in ipairs(CONFIG_SECTIONS) do
    local text = E.config(name)
    if text then cfg[name] = json.decode(text) end
  end
  return cfg
end

-- Loads one plugin file in its own environment. Returns the number of tools added and
-- a list of problems, each "file:line: what".
function M.load_file(path)
  local problems, added = {}, 0
  local f, ferr = io.open(path, "rb")
  if not f then return 0, { path .. ":1: cannot read the file: " .. tostring(ferr) } end
  local src = f:read("a") or ""
  f:close()
  local env = setmetatable({}, { __index = _G })
  local chunk, err = load(src, "@" .. path, "t", env)
  if not chunk then return 0, { err } end
  local ok, ret = xpcall(chunk, function(e)
    local msg = type(e) == "string" and e or ("(error object is a " .. type(e) .. " value)")
    if not has_position(msg) then msg = where(nil, 2) .. msg end
    return msg
  end, { workspace = E.workspace(), workspace_max = E.workspace_max(),  -- see tools/fs.lua
         config = M.config(),
         -- a problem that does not stop the file from loading, reported with the others:
         -- one of the config that the file found (tools/proc.lua: a program of the
         -- allowlist is missing) names the config's JSON pointer (/commands/0/argv0),
         -- not a line of the plugin; any other is the file's
         warn = function(msg)
           msg = tostring(msg)
           problems[#problems + 1] = msg:sub(1, 1) == "/" and msg or path .. ":1: " .. msg
         end })
  if not ok then
    if not ret:find(path, 1, true) then ret = path .. ":1: " .. ret end
    return 0, { ret }
  end
  local list
  if type(ret) ~= "table" then
    return 0, { ("%s:1: the file returned %s; a plugin returns a tool table "
      .. "{name = ..., handler = ...} or a list of them"):format(path, type(ret)) }
  elseif rawget(ret, 1) ~= nil then
    list = ret
  elseif next(ret) == nil then
    -- nothing to offer in this configuration (fs.lua without a workspace), maybe after a
    -- warning (http.lua: the http section does not compile)
    return 0, problems
  else
    list = { ret }
  end
  for i, t in ipairs(list) do
    if type(t) ~= "table" then
      problems[#problems + 1] = ("%s:1: item %d of the returned list is a %s, not a tool "
        .. "table"):format(path, i, type(t))
    else
      local line = tool_line(src, path, t)
      local why = check_tool(t)
      if not why then
        local added_ok, msg = E.add_tool({
          name = t.name, description = t.description, input = t.input, output = t.output,
          handler = t.handler, timeout_ms = t.timeout_ms, origin = path .. ":" .. line,
        })
        if added_ok then added = added + 1 else why = msg end
      end
      if why then problems[#problems + 1] = ("%s:%d: %s"):format(path, line, why) end
    end
  end
  return added, problems
end

return M
