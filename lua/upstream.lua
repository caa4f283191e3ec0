-- upstream.lua: upstream MCP servers (the config's "mcpServers") as tools.<server>.<tool>.
--
-- Runs in the engine's host Lua state (trusted) on luv, so nothing here blocks the loop:
-- every read, write, timer and process is a luv handle, and a tool call waits through its
-- ctx (ctx.await). host_load.c starts this module at the engine's first plugin load or
-- description (tp__host_upstream) and runs the loop until every server has listed its
-- tools (M.pending), so that the namespace and the descriptions have them; it stops it in
-- tp_engine_destroy (M.stop, then the loop while M.stopping).
--
-- A server, over stdio ({command, args, env, cwd}):
--   spawned in a process group of its own; its stderr goes to ours, each line prefixed
--   "[name] "; JSON-RPC 2.0, one message per line.
--   handshake: server/discover first (the 2026-07-28 era: no session, per-request _meta);
--   a server that does not know it (an error, or no answer within DISCOVER_MS) gets the
--   initialize handshake (we offer OFFER and accept the versions of ACCEPTED), then
--   notifications/initialized.
--   tools/list, page by page (at most PAGES_MAX pages; a repeated cursor stops it), again
--   on notifications/tools/list_changed: new tools are added, tools gone fail with
--   tool.unavailable (the registry keeps what a running script may hold).
--   dies: its calls fail with tool.unavailable, and it restarts after a backoff that
--   doubles each time (BACKOFF_MS up to BACKOFF_MAX_MS; it resets once a server stayed up
--   STABLE_MS). An "eager" server restarts when the backoff ends; a lazy one (default) at
--   the first call after it. A call while the backoff runs fails at once with
--   tool.unavailable.
--   stops (M.stop): stdin closed, SIGTERM to its group after GRACE_MS, SIGKILL after
--   another GRACE_MS.
-- A server over Streamable HTTP ({url, headers}): see http_post; its session is DELETEd
-- when it stops.
-- A call: arguments were checked by the engine against the tool's inputSchema (the tool is
-- registered with it); tools/call carries a progressToken; a progress notification goes
-- to ctx.progress and restarts the call's timer (timeout_ms, default 60 s) up to a hard cap
-- (HARD_FACTOR times it); at the timer's end, or when the engine ends the call (its time
-- limit, the run's end), the server gets notifications/cancelled. The result unwraps to
-- structuredContent (checked against the outputSchema by the engine), else the one text
-- block as JSON when it parses, else as a string, else {content = {...}}; isError fails
-- the call with tool.failed and the server's text.
local E = ...

-- Every message goes to the engine's logger (tp_engine_on_log), never to stderr itself.
local function log(level, text) E.emit(level, "upstream", text) end
local uv = require("luv")
local json = require("json")

local M = {}

local CLIENT_INFO = { name = "tidepool", version = "1" }
-- The protocol versions are the engine's one list (tp_mcp_version, engine/lib/mcpver.c),
-- latest first: the 2026 era's, then the handshake's. tidepool offers the first handshake
-- version it accepts, and accepts those marked client.
local MODERN, OFFER, ACCEPTED, SPOKEN = nil, nil, {}, {}
for _, v in ipairs(E.mcp_versions) do
  if v.modern then MODERN = MODERN or v.version
  elseif v.client then
    OFFER = OFFER or v.version
    ACCEPTED[v.version] = true
    SPOKEN[#SPOKEN + 1] = v.version
  end
end
local PAGES_MAX = 64
local DISCOVER_MS = 10000      -- no answer to server/discover: fall back to initialize
local TIMEOUT_MS = 60000       -- a call's timer (config timeout_ms), and the handshake's
local START_WAIT_MS = 5000     -- a start no caller bounds waits this long for a server
                               -- that does not answer (config start_wait_ms)
local HARD_FACTOR = 4          -- progress extends a call up to this many timeouts
local BACKOFF_MS, BACKOFF_MAX_MS, STABLE_MS = 500, 30000, 30000
local GRACE_MS = 1000
-- What a server may send (see "Size" at the top).
local LINE_MAX = 64 * 1024 * 1024  -- no message is ever longer, whatever the limits
local SMALL = 64 * 1024            -- lines up to this are read without asking whose they are
local MESSAGE_MAX = 4 * 1024 * 1024  -- config max_message: a message of no run's
local TOOLS_MAX = 10000            -- config max_tools: tools of one server
local DESCRIPTIONS_MAX = 1024 * 1024  -- config max_descriptions: their descriptions' bytes
local STDERR_LINE_MAX = 64 * 1024

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
  repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

local ARRAY_MT = getmetatable(json.array({}))

-- What a JSON value decoded into v was, in words.
local function kind(v)
  if v == json.null then return "null" end
  if type(v) == "table" then return getmetatable(v) == ARRAY_MT and "array" or "object" end
  if type(v) == "number" then return "number" end
  return type(v)
end

local function a_kind(v)
  local k = kind(v)
  return (k:match("^[aeiou]") and "an " or "a ") .. k
end

local servers, by_id, order = {}, {}, {}
local problems = {}

local function problem(fmt, ...)
  problems[#problems + 1] = fmt:format(...)
end

local function now() uv.update_time(); return uv.now() end

local function close(h)
  if h and not h:is_closing() then h:close() end
end

local function new_timer(ms, fn)
  local t = uv.new_timer()
  t:start(math.max(0, math.ceil(ms)), 0, function() close(t); fn() end)
  return t
end

-- The other names of an upstream tool, with the server's raw name and the tool's
-- (tools["my-files"]["read-file"]), beside its Lua name (tools.my_files.read_file).
local function aliases(srv, f)
  local list, seen = {}, { [srv.id .. "." .. f.lua] = true }
  for _, s in ipairs({ srv.id, srv.name }) do
    for _, t in ipairs({ f.lua, f.raw }) do
      local a = s .. "." .. t
      if not seen[a] then seen[a] = true; list[#list + 1] = a end
    end
  end
  return list
end

-- A raw name as a Lua identifier: '-', '.', spaces and any other character that cannot be
-- in one become '_', a leading digit gets '_' before it, a keyword gets '_' after it.
function M.identifier(raw)
  local s = raw:gsub("[^%w_]", "_")
  if s == "" or s:match("^%d") then s = "_" .. s end
  if KEYWORDS[s] then s = s .. "_" end
  return s
end
local identifier = M.identifier

local function is_identifier(s)
  return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil and not KEYWORDS[s]
end

-- ---- JSON-RPC over the transport -------------------------------------------------------

local on_message, http_post  -- forward

local function send(srv, msg)
  msg.jsonrpc = "2.0"
  local ok, line = pcall(json.encode, msg)
  if not ok then return false end
  if srv.url then return http_post(srv, msg, line) end
  if not srv.stdin or srv.stdin:is_closing() then return false end
  srv.stdin:write(line .. "\n")
  return true
end

local function meta_params(srv, params)
  params = params or {}
  if srv.era == "modern" then
    params._meta = params._meta or {}
    params._meta["io.modelcontextprotocol/protocolVersion"] = MODERN
    params._meta["io.modelcontextprotocol/clientInfo"] = CLIENT_INFO
    params._meta["io.modelcontextprotocol/clientCapabilities"] = {}
  end
  return params
end

-- Sends a request; cb(result, err) once: err is {code, message} from the server, or
-- {message} when it timed out or the server went away. Returns the request's id.
local function request(srv, method, params, cb, timeout_ms)
  srv.next_id = srv.next_id + 1
  local id = srv.next_id
  local p = { cb = cb, cap = srv.msg_max }
  srv.pending[id] = p
  if timeout_ms then
    p.timer = new_timer(timeout_ms, function()
      if srv.pending[id] == p then
        srv.pending[id] = nil
        if p.http then p.http:cancel() end
        cb(nil, { message = ("%s: no answer within %d ms"):format(method, timeout_ms),
                  timeout = true })
      end
    end)
  end
  if not send(srv, { id = id, method = method, params = meta_params(srv, params) }) then
    srv.pending[id] = nil
    close(p.timer)
    cb(nil, { message = "the server is not running" })
  end
  return id
end

local function fail_pending(srv, why)
  local pend = srv.pending
  srv.pending = {}
  for _, p in pairs(pend) do
    close(p.timer)
    if p.http then p.http:cancel() end
    p.cb(nil, { message = why, gone = true })
  end
end

-- Ends request id with an error of the transport's (HTTP): err = {message, gone}.
local function fail_one(srv, id, err)
  local p = id ~= nil and srv.pending[id]
  if not p then return end
  srv.pending[id] = nil
  close(p.timer)
  p.cb(nil, err)
end

-- The cap on a message whose first bytes are head, and the request it answers when head
-- says (its "id" comes before its result, as every SDK writes it): that request's cap
-- (p.cap: what its caller may receive), else the largest cap of any request waiting and
-- of a message of no run's (srv.msg_max), since whose it is cannot be told yet.
local function message_cap(srv, head)
  local id = E.peek_id(head)
  local p = id ~= nil and srv.pending[id] or nil
  if p then return p.cap or srv.msg_max, id end
  local cap = srv.msg_max
  for _, q in pairs(srv.pending) do
    if q.cap and q.cap > cap then cap = q.cap end
  end
  return cap, nil
end

-- A message longer than its cap (message_cap) came in: it is dropped unread, and the
-- request it answers fails (tool.invalid_output for a call); when head does not say which
-- request, every request waiting fails, none of them could receive it.
local function too_long(srv, head, size, cap)
  local id = E.peek_id(head)
  local what = ("the MCP server %s sent a message of more than %d bytes"):format(srv.name, size)
  log("warn", ("[%s] a message of more than %d bytes (the most %d) was dropped")
    :format(srv.name, size, cap))
  local function fail(rid, p)
    local why = p.cap_why and ("%s, more than %s: %s"):format(what, p.cap_why, p.cap_fix)
      or ("%s, more than the %d bytes it may send outside a call (its max_message in the "
          .. "config)"):format(what, cap)
    p.invalid = true
    srv.pending[rid] = nil
    close(p.timer)
    if p.http then p.http:cancel() end
    p.cb(nil, { message = why, invalid = true })
  end
  local p = id ~= nil and srv.pending[id] or nil
  if p then return fail(id, p) end
  local ids = {}
  for rid in pairs(srv.pending) do ids[#ids + 1] = rid end
  for _, rid in ipairs(ids) do
    local q = srv.pending[rid]
    if q then fail(rid, q) end
  end
end

-- Decodes a message: a long one that answers a call is decoded under that call's run's
-- memory (p.decode, ctx.decode: charged as it is built); a call whose run cannot hold it
-- fails (the run's verdict is limit.memory).
local function on_line(srv, line)
  if line:match("^%s*$") then return end
  local ok, msg
  local id = #line > SMALL and E.peek_id(line) or nil
  local p = id ~= nil and srv.pending[id] or nil
  if p and p.decode then
    ok, msg = pcall(p.decode, line)
    if not ok then
      return fail_one(srv, id, { message = ("the answer of the MCP server %s (%d bytes) "
        .. "cannot be taken: %s"):format(srv.name, #line, tostring(msg)), limit = true })
    end
  else
    ok, msg = pcall(json.decode, line)
  end
  if not ok or type(msg) ~= "table" then
    log("warn", ("[%s] (not JSON-RPC on stdout) %s"):format(srv.name, line:sub(1, 200)))
    return
  end
  srv.msg_size = #line
  if msg[1] ~= nil then  -- a batch
    for _, m in ipairs(msg) do if type(m) == "table" then on_message(srv, m) end end
  else
    on_message(srv, msg)
  end
end

-- A reader of lines in linear time: feed(chunk) calls each(line) for every whole line of
-- the chunks fed so far. A line is kept in pieces until its newline; once it is longer
-- than SMALL, cap_of(head) (head: its first bytes) says the most it may be, and past that
-- long(head, size, cap) is called and the rest of the line is skipped to its newline.
-- feed(nil) ends it: a last line without a newline is given to each.
local function line_reader(each, cap_of, long)
  local parts, size, cap, skip = {}, 0, nil, false
  return function(chunk)
    if chunk == nil then  -- the end: a last line without its newline
      if #parts > 0 and not skip then each(table.concat(parts)) end
      parts, size, cap, skip = {}, 0, nil, false
      return
    end
    local from, n = 1, #chunk
    while from <= n do
      local nl = chunk:find("\n", from, true)
      local stop = nl and nl - 1 or n
      if not skip then
        parts[#parts + 1] = (from == 1 and stop == n) and chunk or chunk:sub(from, stop)
        size = size + (stop - from + 1)
        if size > SMALL then
          if not cap then
            local head = table.concat(parts)
            parts = { head }
            cap = cap_of(head)
          end
          if size > cap then
            local head, got, most = parts[1], size, cap
            parts, size, cap, skip = {}, 0, nil, true
            long(head, got, most)
          end
        end
      end
      if not nl then return end
      if skip then skip = false
      else
        local line = #parts == 1 and parts[1] or table.concat(parts)
        parts, size, cap = {}, 0, nil
        each(line)
      end
      from = nl + 1
    end
  end
end

local function stdout_reader(srv)
  return line_reader(function(line) on_line(srv, line) end,
    function(head) return (message_cap(srv, head)) end,
    function(head, size, cap) too_long(srv, head, size, cap) end)
end

local function stderr_reader(srv)
  return line_reader(function(line) log("info", "[" .. srv.name .. "] " .. line) end,
    function() return STDERR_LINE_MAX end,
    function(head) log("info", "[" .. srv.name .. "] " .. head .. " (cut)") end)
end

-- ---- Streamable HTTP ({url, headers}) --------------------------------------------------
-- Each message is a POST (trusted: the config names the endpoint, so the http section's
-- egress policy does not apply); the answer is JSON (one message or a batch) or an SSE
-- stream of messages (progress, then the response), told apart by its first byte. The
-- Mcp-Session-Id the server gives is sent back; a 404 with a session means it expired:
-- the server is handshaken again at the next call. Messages the server would send on a
-- GET stream of its own (list_changed outside a request) are not listened for.

-- An SSE stream's reader (st: {reader, data, size, drop}): lines in linear time, each
-- event's data lines joined and taken as one message, under the caps of message_cap.
local function sse_reader(srv, st)
  local function data_of(line) return (line:gsub("^data: ?", "", 1)) end
  st.data, st.size = {}, 0
  st.reader = line_reader(function(line)
    if line:sub(-1) == "\r" then line = line:sub(1, -2) end
    if line == "" then
      if #st.data > 0 and not st.drop then on_line(srv, table.concat(st.data, "\n")) end
      st.data, st.size, st.drop = {}, 0, false
    elseif line:sub(1, 5) == "data:" and not st.drop then
      local d = data_of(line)
      st.size = st.size + #d
      st.data[#st.data + 1] = d
      if st.size > SMALL then
        local head = table.concat(st.data, "\n"):sub(1, 2 * SMALL)
        local cap = message_cap(srv, head)
        if st.size > cap then
          st.data, st.drop = {}, true
          too_long(srv, head, st.size, cap)
        end
      end
    end
  end, function(head)
    return head:sub(1, 5) == "data:" and message_cap(srv, data_of(head)) or SMALL
  end, function(head, size, cap)
    st.data, st.drop = {}, true
    if head:sub(1, 5) == "data:" then too_long(srv, data_of(head), size, cap) end
  end)
end

-- Copies the string (or number) values of the config map from (headers, env) into to.
-- A value "env:NAME" is tidepool's own variable NAME, as in the http and commands
-- sections; one that is not set is left out (tidepool config check and --strict name it).
local function copy_strings(from, to)
  if type(from) ~= "table" then return end
  for k, v in pairs(from) do
    if type(k) == "string" and (type(v) == "string" or type(v) == "number") then
      v = tostring(v)
      if v:sub(1, 4) == "env:" then v = os.getenv(v:sub(5)) end
      to[k] = v
    end
  end
end

function http_post(srv, msg, body)
  local cfg = srv.cfg
  local headers = { ["Content-Type"] = "application/json",
                    ["Accept"] = "application/json, text/event-stream" }
  copy_strings(cfg.headers, headers)
  if srv.session then headers["Mcp-Session-Id"] = srv.session end
  if srv.era == "modern" then headers["MCP-Protocol-Version"] = MODERN
  elseif srv.version then headers["MCP-Protocol-Version"] = srv.version end
  local id = msg.method ~= nil and msg.id or nil  -- the request this POST carries
  local st = { mode = nil, json = {}, size = 0 }
  -- initialize's answer waits for the end of its POST: its headers carry the session
  local held = msg.method == "initialize" and {} or nil
  local function on_data(chunk)
    if held then held[#held + 1] = chunk; return end
    if st.mode == nil then
      local c = chunk:match("^%s*(.)")
      if not c then return end
      st.mode = (c == "{" or c == "[") and "json" or "sse"
      if st.mode == "sse" then sse_reader(srv, st) end
    end
    if st.mode == "sse" then st.reader(chunk)
    elseif not st.drop then  -- one JSON body: held in pieces, under the caps of message_cap
      st.json[#st.json + 1] = chunk
      st.size = st.size + #chunk
      if st.size > SMALL then
        if not st.cap then
          st.json = { table.concat(st.json) }
          st.cap = message_cap(srv, st.json[1])
        end
        if st.size > st.cap then
          local head = st.json[1]
          st.json, st.drop = {}, true
          too_long(srv, head, st.size, st.cap)
        end
      end
    end
  end
  local req
  local ok, made = pcall(require("tidepool.http").request, {
    method = "POST", url = srv.url, headers = headers, body = body, trusted = true,
    timeout_ms = id and 0 or 10000, on_data = on_data,
  }, function(res, err)
    if req then srv.posts[req] = nil end
    if id and srv.pending[id] then srv.pending[id].http = nil end
    if not res then
      return fail_one(srv, id, { gone = true, message = ("cannot reach the MCP server %s at "
        .. "%s: %s"):format(srv.name, srv.url, tostring(err and err.message)) })
    end
    local sid = res.headers and res.headers["mcp-session-id"]
    if type(sid) == "string" and sid ~= "" then srv.session = sid end
    if held then
      local chunks = held
      held = nil
      for _, c in ipairs(chunks) do on_data(c) end
    end
    if st.mode == "json" and not st.drop then
      on_line(srv, table.concat(st.json))
    elseif st.mode == "sse" then
      st.reader("\n\n")
    end
    if res.status == 404 and srv.session and msg.method ~= "initialize" then
      srv.session = nil  -- expired: a new handshake at the next call
      if srv.listen_req then srv.listen_req:cancel(); srv.listen_req = nil end
      srv.state, srv.restart_at, srv.down_why = "down", 0, "its session expired"
    end
    if id and srv.pending[id] then  -- no answer to it in the body
      fail_one(srv, id, { gone = res.status == 404 or res.status >= 500,
        message = ("the MCP server %s answered HTTP %d to %s without a JSON-RPC "
          .. "response"):format(srv.name, res.status, msg.method) })
    end
  end)
  if not ok then return false end
  req = made
  if id and srv.pending[id] then srv.pending[id].http = req end
  srv.posts[req] = true
  return true
end

-- The GET stream a stateful server (one that gave a session) sends its own notifications
-- on (list_changed); opened once the server is ready, again a second after it ends while
-- the server is ready, not again once refused (405: the server has none).
local function listen(srv)
  if not srv.url or not srv.session or srv.listen_req or srv.no_listen then return end
  local headers = { ["Accept"] = "text/event-stream", ["Mcp-Session-Id"] = srv.session }
  if type(srv.cfg.headers) == "table" then
    for k, v in pairs(srv.cfg.headers) do
      if type(k) == "string" and (type(v) == "string" or type(v) == "number") then
        headers[k] = tostring(v)
      end
    end
  end
  if srv.version then headers["MCP-Protocol-Version"] = srv.version end
  local st = {}
  sse_reader(srv, st)
  local ok, req = pcall(require("tidepool.http").request, {
    method = "GET", url = srv.url, headers = headers, trusted = true, timeout_ms = 0,
    on_data = function(chunk) st.reader(chunk) end,
  }, function(res)
    srv.listen_req = nil
    if not res or res.status ~= 200 then srv.no_listen = true; return end
    if srv.state == "ready" then
      srv.listen_timer = new_timer(1000, function()
        if srv.state == "ready" then listen(srv) end
      end)
    end
  end)
  if ok then
    srv.listen_req = req
    srv.posts[req] = true
  end
end

-- ---- tools -----------------------------------------------------------------------------

local function text_of(content)
  local parts = {}
  if type(content) == "table" then
    for _, c in ipairs(content) do
      if type(c) == "table" and c.type == "text" and type(c.text) == "string" then
        parts[#parts + 1] = c.text
      end
    end
  end
  return table.concat(parts, "\n")
end

-- A tools/call result as the script gets it (see the top of the file).
function M.unwrap(res, decode)
  if type(res) ~= "table" then return nil end
  if res.isError == true then
    local t = text_of(res.content)
    return nil, t ~= "" and t or "the server reported an error without a message"
  end
  if res.structuredContent ~= nil then return res.structuredContent end
  local content = res.content
  if type(content) ~= "table" or #content == 0 then return nil end
  if #content == 1 and type(content[1]) == "table" and content[1].type == "text"
     and type(content[1].text) == "string" then
    local text = content[1].text
    local ok, v = pcall(decode or json.decode, text)
    if ok then return v end
    if decode and tostring(v):find("memory", 1, true) then error(v, 0) end
    return text
  end
  return { content = content }
end
local unwrap = M.unwrap

-- The shape of a result as describe.lua writes types ({id: integer, tags: string[]}),
-- at most 3 levels deep and 10 fields an object, for tools.describe of a tool with no
-- outputSchema after it answered (E.seen): the next script reads what comes back.
local function shape(v, depth)
  local tv = type(v)
  if tv == "string" or tv == "boolean" then return tv end
  if tv == "number" then return math.type(v) == "integer" and "integer" or "number" end
  if v == json.null then return "json.null" end
  if tv ~= "table" then return "any" end
  if next(v) == nil then return "{}" end
  if depth >= 3 then return "table" end
  local n = #v
  local seq = n > 0
  if seq then
    for k in pairs(v) do
      if math.type(k) ~= "integer" or k < 1 or k > n then seq = false break end
    end
  end
  if seq then
    local parts, seen = {}, {}
    for i = 1, math.min(n, 3) do
      local p = shape(v[i], depth + 1)
      if not seen[p] then seen[p] = true; parts[#parts + 1] = p end
    end
    local it = table.concat(parts, "|")
    if #parts > 1 then it = "(" .. it .. ")" end
    return it .. "[]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local fields = {}
  for i = 1, math.min(#keys, 10) do
    local k = keys[i]
    local name = k:match("^[%a_][%w_]*$") and k or ("%q"):format(k)
    fields[i] = name .. ": " .. shape(v[k] == nil and v[tonumber(k)] or v[k], depth + 1)
  end
  if #keys > 10 then fields[#fields + 1] = "..." end
  return "{" .. table.concat(fields, ", ") .. "}"
end
M.shape = function(v) return shape(v, 0) end

local start_server, list_tools, call_cap  -- forward

local function unavailable(fmt, ...)
  error({ code = "tool.unavailable", message = fmt:format(...) }, 0)
end

-- Waits (in the handler) until srv is ready, starting it when a lazy server's backoff is
-- over. Fails at once while the backoff runs.
local function await_ready(srv, tool, ctx)
  if srv.state == "ready" then return end
  if srv.state == "down" then
    local left = srv.restart_at - now()
    if left > 0 then
      unavailable("the MCP server %s behind tools.%s is down (%s); it restarts in %d ms: "
        .. "try again later, or go on without it", srv.name, tool,
        srv.down_why or "it exited", left)
    end
    start_server(srv)
  end
  if srv.state == "failed" or srv.state == "stopped" then
    unavailable("the MCP server %s behind tools.%s is not running (%s)", srv.name, tool,
      srv.down_why or "stopped")
  end
  if srv.state ~= "ready" then
    local ok = ctx.await(function(cb) srv.waiters[#srv.waiters + 1] = cb end)
    if not ok then
      unavailable("the MCP server %s behind tools.%s could not start (%s)", srv.name, tool,
        srv.down_why or "it exited")
    end
  end
end

-- What the answer to a call may be: the run's --tool-bytes caps the JSON of the result it
-- receives, and a message may carry that result about three times over (structuredContent,
-- its copy as text, JSON escapes), so 3 x tool_bytes; and never more than its
-- memory limit, since the decoded result must fit in it. Returns the cap, the words for it
-- and the fix.
function call_cap(ctx)
  local tb, mem = ctx.tool_bytes, ctx.memory
  local cap, why, fix = LINE_MAX, ("the %d bytes a message may have"):format(LINE_MAX),
    "ask for less (a smaller page, fewer fields)"
  if tb and tb > 0 and 3 * tb + SMALL < cap then
    cap = 3 * tb + SMALL
    why = ("what this run may receive (--tool-bytes %d: a result's JSON; the message "
      .. "%d bytes)"):format(tb, cap)
    fix = "ask for less (a smaller page, fewer fields), or raise --tool-bytes"
  end
  if mem and mem > 0 and mem + SMALL < cap then
    cap = mem + SMALL
    why = ("what this run may receive (--memory %d: the message %d bytes)"):format(mem, cap)
    fix = "ask for less (a smaller page, fewer fields), or raise --memory"
  end
  return cap, why, fix
end

local function call_tool(srv, info, args, ctx)
  local tool = srv.id .. "." .. info.lua
  if srv.gone[info.raw] then
    unavailable("the MCP server %s no longer offers this tool (tools.list() shows what "
      .. "there is)", srv.name)
  end
  await_ready(srv, tool, ctx)
  local timeout = srv.timeout_ms
  local hard_at = now() + timeout * HARD_FACTOR
  local id, p
  local settled = false
  -- closed when the call ends however it ends: a request still pending is cancelled
  local guard = { closed = false }
  function guard.is_closing() return guard.closed end
  function guard.close()
    if guard.closed then return end
    guard.closed = true
    if p then close(p.timer) end
    if id and srv.pending[id] == p and not settled then
      srv.pending[id] = nil
      if p.http then p.http:cancel() end
      send(srv, { method = "notifications/cancelled",
                  params = meta_params(srv, { requestId = id, reason = "the caller's call "
                                              .. "ended (time limit, or its run ended)" }) })
    end
    if id and srv.progress[id] then
      srv.progress[srv.progress[id]] = nil
      srv.progress[id] = nil
    end
  end
  ctx.track(guard)
  local parent = ctx.traceparent and ctx.traceparent() or nil
  local t0 = parent and E.span_start()
  local res, err = ctx.await(function(done)
    local token = "tp-" .. tostring(srv.next_id + 1)
    local meta = { progressToken = token }
    meta.traceparent = parent  -- W3C trace context: the call's span
    id = request(srv, "tools/call", { name = info.raw, arguments = args, _meta = meta },
                 function(r, e) settled = true; done(r, e) end)
    p = srv.pending[id]
    if not p then return end  -- failed at once
    p.cap, p.cap_why, p.cap_fix = call_cap(ctx)
    p.decode = ctx.decode
    local function arm(ms)
      close(p.timer)
      p.timer = new_timer(ms, function()
        if srv.pending[id] ~= p then return end
        srv.pending[id] = nil
        if p.http then p.http:cancel() end
        srv.progress[id] = nil
        send(srv, { method = "notifications/cancelled",
                    params = meta_params(srv, { requestId = id, reason = "timed out" }) })
        settled = true
        local msg
        if now() >= hard_at then
          msg = ("the MCP server %s did not answer within %d ms, the most its progress "
            .. "reports may extend the call to (%d times its timeout_ms of %d)")
            :format(srv.name, timeout * HARD_FACTOR, HARD_FACTOR, timeout)
        else
          msg = ("the MCP server %s did not answer within %d ms, nor report progress")
            :format(srv.name, timeout)
        end
        done(nil, { timeout = true, message = msg })
      end)
    end
    arm(timeout)
    srv.progress[token] = function(params)
      local left = hard_at - now()
      if left > 0 then arm(math.min(timeout, left + 1)) end
      ctx.progress(type(params.message) == "string" and params.message or nil,
                   params.progress, params.total)
    end
    srv.progress[id] = token  -- so the guard and the end of the call let the token go
  end)
  if id and srv.progress[id] then
    srv.progress[srv.progress[id]] = nil
    srv.progress[id] = nil
  end
  guard.closed = true
  if p then close(p.timer) end
  if parent then  -- the request's span, under the call's
    E.span(parent, "mcp tools/call " .. info.raw, t0,
           not err and not (type(res) == "table" and res.isError == true),
           err and (err.timeout and "tool.timeout" or "tool.failed") or nil, srv.name)
  end
  if err then
    if err.timeout then error({ code = "tool.timeout", message = err.message }, 0) end
    if err.invalid then error({ code = "tool.invalid_output", message = err.message }, 0) end
    if err.protocol or err.limit then error({ code = "tool.failed", message = err.message }, 0) end
    if err.gone then unavailable("%s", err.message) end
    error({ code = "tool.failed", message = ("the MCP server %s answered with an error: "
      .. "%s%s"):format(srv.name, tostring(err.message),
        err.code and (" (JSON-RPC code " .. tostring(err.code) .. ")") or "") }, 0)
  end
  local v, failed = unwrap(res, ctx.decode)
  if failed then
    error({ code = "tool.failed", message = failed }, 0)
  end
  if info.text_result then  -- no outputSchema: remember what came back, for tools.describe
    local s = shape(v, 0)
    if #s > 600 then s = shape(v, 2) end
    if #s > 600 then s = shape(v, 3) end
    if #s <= 600 then E.seen(info.name, s) end
  end
  return v
end

-- s cut to at most n bytes, not inside a UTF-8 sequence.
local function utf8_cut(s, n)
  if #s <= n then return s end
  local cut = n
  while cut > 0 and (s:byte(cut + 1) or 0) >= 0x80 and (s:byte(cut + 1) or 0) < 0xC0 do
    cut = cut - 1
  end
  return s:sub(1, cut)
end

-- Registers the tools of a listing that are new; marks those gone. Names: see the top.
local function register(srv, list)
  local seen = {}
  for _, t in ipairs(list) do seen[t.name] = t end
  for raw in pairs(srv.tools) do
    if not seen[raw] then srv.gone[raw] = true end
  end
  -- the Lua name of each new tool, and the collisions among all of them
  local taken = {}
  for _, info in pairs(srv.tools) do taken[info.lua] = info.raw end
  local fresh, clash, pos = {}, {}, {}
  for i, t in ipairs(list) do pos[t.name] = i end
  for _, t in ipairs(list) do
    srv.gone[t.name] = nil
    if not srv.tools[t.name] then
      local lua = srv.rename[t.name] or identifier(t.name)
      if taken[lua] then
        clash[t.name] = taken[lua]
        if srv.tools[taken[lua]] == nil then clash[taken[lua]] = t.name end
      else
        taken[lua] = t.name
      end
      fresh[#fresh + 1] = { raw = t.name, lua = lua, def = t }
    end
  end
  local added, cut_told = 0, false
  for _, f in ipairs(fresh) do
    local other = clash[f.raw]
    if other then
      if (pos[other] or 0) < (pos[f.raw] or 0) then  -- once a pair, in the server's order
        problem("mcpServers.%s: tools \"%s\" and \"%s\" both become tools.%s.%s; give one "
          .. "another name with \"rename\": {\"%s\": \"...\"}", srv.name, other, f.raw, srv.id,
          f.lua, f.raw)
      end
    else
      local def = f.def
      local info = { raw = f.raw, lua = f.lua, name = srv.id .. "." .. f.lua,
                     text_result = type(def.outputSchema) ~= "table" }
      local desc = type(def.description) == "string" and def.description
                   or type(def.title) == "string" and def.title or ""
      if srv.desc_bytes + #desc > srv.desc_max then
        local left = math.max(0, srv.desc_max - srv.desc_bytes)
        desc = utf8_cut(desc, left)
        if not cut_told then
          cut_told = true
          problem("mcpServers.%s: its tools' descriptions hold more than %d bytes together; "
            .. "they are cut from tool \"%s\" on (its max_descriptions in the config)",
            srv.name, srv.desc_max, f.raw)
        end
      end
      srv.desc_bytes = srv.desc_bytes + #desc
      local input = type(def.inputSchema) == "table" and def.inputSchema
                    or { type = "object" }
      local ok, in_text = pcall(json.encode, input)
      local out_text = nil
      if ok and type(def.outputSchema) == "table" then
        ok, out_text = pcall(json.encode, def.outputSchema)
      end
      local added_ok, why
      if not ok then
        added_ok, why = false, "its schema cannot be read as JSON"
      else
        added_ok, why = E.add_tool({
          name = srv.id .. "." .. f.lua, description = desc, input = in_text,
          output = out_text, timeout_ms = srv.timeout_ms * HARD_FACTOR + 1000,  -- a backstop
          origin = "mcp server " .. srv.name, upstream = true,
          alias = aliases(srv, f),
          handler = function(args, ctx) return call_tool(srv, info, args, ctx) end,
        })
      end
      if added_ok then
        srv.tools[f.raw] = info
        added = added + 1
        if info.text_result then E.seen_load(info.name) end  -- what --state kept of it
      elseif why and why:find("alias", 1, true) then
        srv.tools[f.raw] = info  -- registered, reachable by its Lua name only
        problem("mcpServers.%s: tool \"%s\": %s", srv.name, f.raw, why)
      else
        problem("mcpServers.%s: tool \"%s\" (tools.%s.%s) refused: %s", srv.name, f.raw,
          srv.id, f.lua, tostring(why))
      end
    end
  end
  return added
end

-- tools/list, every page; then register; then done(ok).
function list_tools(srv, done)
  if srv.listing then srv.list_again = true; return end
  srv.listing = true
  local all, seen_cursor, pages, bytes, full = {}, {}, 0, 0, false
  local function page(cursor)
    pages = pages + 1
    request(srv, "tools/list", cursor and { cursor = cursor } or {}, function(res, err)
      if err or type(res) ~= "table" then
        srv.listing = false
        problem("mcpServers.%s: tools/list failed: %s", srv.name,
          err and tostring(err.message) or "no result")
        if done then done(false) end
        return
      end
      bytes = bytes + (srv.msg_size or 0)
      for _, t in ipairs(type(res.tools) == "table" and res.tools or {}) do
        if type(t) == "table" and type(t.name) == "string" and t.name ~= "" then
          if #all >= srv.tools_max then
            full = true
            problem("mcpServers.%s: it lists more than %d tools; the first %d are used "
              .. "(its max_tools in the config)", srv.name, srv.tools_max, srv.tools_max)
            break
          end
          all[#all + 1] = t
        end
      end
      local next_cursor = res.nextCursor
      if not full and bytes > srv.msg_max and type(next_cursor) == "string" then
        full = true
        problem("mcpServers.%s: its tools/list pages hold more than %d bytes together; the "
          .. "tools of the first %d pages are used (its max_message in the config)", srv.name,
          srv.msg_max, pages)
      end
      if full then next_cursor = nil end
      if type(next_cursor) == "string" and next_cursor ~= "" then
        if seen_cursor[next_cursor] then
          problem("mcpServers.%s: tools/list gave the cursor %q twice; listing stopped "
            .. "there", srv.name, next_cursor:sub(1, 80))
        elseif pages >= PAGES_MAX then
          problem("mcpServers.%s: tools/list has more than %d pages; the tools of the "
            .. "first %d are used", srv.name, PAGES_MAX, PAGES_MAX)
        else
          seen_cursor[next_cursor] = true
          return page(next_cursor)
        end
      end
      srv.listing = false
      local gone = 0
      for _ in pairs(srv.gone) do gone = gone + 1 end
      local n = register(srv, all)
      if n > 0 and srv.listed then E.annotate() end
      for _ in pairs(srv.gone) do gone = gone - 1 end
      -- after the start (a re-list, or a server the start went on without): the engine's
      -- clients hear of it (tp_engine_on_tools_changed)
      if (srv.listed or srv.late) and (n > 0 or gone ~= 0) then E.tools_changed() end
      srv.listed = true
      if done then done(true) end
      if srv.list_again then
        srv.list_again = false
        list_tools(srv)
      end
    end, srv.timeout_ms)
  end
  page(nil)
end

-- ---- messages from the server ----------------------------------------------------------

function on_message(srv, msg)
  local method, id = msg.method, msg.id
  if method == nil and id ~= nil then  -- a response
    local p = srv.pending[id]
    if not p then return end  -- cancelled or timed out meanwhile
    srv.pending[id] = nil
    close(p.timer)
    if type(msg.error) == "table" then
      p.cb(nil, { code = msg.error.code, message = tostring(msg.error.message),
                  data = msg.error.data })
    elseif msg.error ~= nil then
      p.cb(nil, { protocol = true, message = ("the MCP server %s broke the protocol: its "
        .. "error is %s, not an object {code, message}"):format(srv.name, a_kind(msg.error)) })
    elseif type(msg.result) ~= "table" or getmetatable(msg.result) == ARRAY_MT then
      p.cb(nil, { protocol = true, message = ("the MCP server %s broke the protocol: its "
        .. "answer's result is %s, not an object"):format(srv.name,
          msg.result == nil and "missing (and there is no error)" or a_kind(msg.result)) })
    else
      p.cb(msg.result, nil)
    end
    return
  end
  if type(method) ~= "string" then return end
  if id ~= nil then  -- a request of the server's
    if method == "ping" then
      send(srv, { id = id, result = {} })
    elseif method == "roots/list" then
      send(srv, { id = id, result = { roots = json.array({}) } })
    else
      send(srv, { id = id, error = { code = -32601, message = "tidepool does not offer "
                                     .. method } })
    end
    return
  end
  local params = type(msg.params) == "table" and msg.params or {}
  if method == "notifications/tools/list_changed" then
    if srv.state == "ready" then list_tools(srv) end
  elseif method == "notifications/progress" then
    local f = params.progressToken ~= nil and srv.progress[params.progressToken]
    if type(f) == "function" then f(params) end
  elseif method == "notifications/message" then
    local data = params.data
    if type(data) ~= "string" then
      local ok, text = pcall(json.encode, data)
      data = ok and text or tostring(data)
    end
    log("info", ("[%s] %s: %s"):format(srv.name, tostring(params.level or "log"), data))
  end
end

-- ---- the process -----------------------------------------------------------------------

local function set_ready(srv, ok, why)
  if not ok then srv.down_why = why end
  E.upstream_state(srv.name, ok, false)
  local waiters = srv.waiters
  srv.waiters = {}
  for _, w in ipairs(waiters) do w(ok) end
end

local function kill_group(srv, sig)
  if srv.pid and not uv.kill(-srv.pid, sig) then uv.kill(srv.pid, sig) end
end

local function on_exit(srv, code, signal)
  close(srv.proc)
  close(srv.stdin)
  srv.proc, srv.stdin, srv.pid = nil, nil, nil
  -- the pipes are read to their end by their own callbacks, then closed there
  local why = ("it exited with code %d%s"):format(code or -1,
    signal and signal ~= 0 and (", signal " .. signal) or "")
  srv.down_why = why
  fail_pending(srv, ("the MCP server %s stopped during the call (%s)"):format(srv.name, why))
  if srv.state == "stopping" or srv.state == "stopped" then
    srv.state = "stopped"
    close(srv.term_timer)
    close(srv.kill_timer)
    return
  end
  local was_ready = srv.state == "ready"
  if not srv.listed then  -- never came up: no tools, no restart
    srv.state = "failed"
    srv.first_done = true
    if not srv.reported then
      srv.reported = true
      problem("mcpServers.%s: the server %s before it listed its tools%s", srv.name, why,
        srv.last_err and (": " .. srv.last_err) or " (its messages are above, prefixed [" ..
        srv.name .. "])")
    end
    set_ready(srv, false, why)
    return
  end
  if was_ready and srv.up_since and now() - srv.up_since >= STABLE_MS then srv.fails = 0 end
  srv.fails = srv.fails + 1
  local backoff = math.min(BACKOFF_MAX_MS, BACKOFF_MS * 2 ^ (srv.fails - 1))
  srv.state = "down"
  srv.restart_at = now() + backoff
  E.upstream_state(srv.name, false, true)
  log("warn", ("[%s] the server stopped (%s); it restarts in %d ms")
    :format(srv.name, why, backoff))
  set_ready(srv, false, why)
  if srv.eager then
    close(srv.restart_timer)
    srv.restart_timer = new_timer(backoff, function()
      if srv.state == "down" then start_server(srv) end
    end)
  end
end

local function handshake(srv)
  local timeout = srv.timeout_ms
  local function ready()
    srv.state = "ready"
    srv.up_since = now()
    listen(srv)
    if srv.listed then
      list_tools(srv)  -- a restart: the list may have changed
      set_ready(srv, true)
    else
      list_tools(srv, function(ok)
        if ok then
          set_ready(srv, true)
          if srv.late then  -- the start went on without it: say that its tools came
            local n = 0
            for _ in pairs(srv.tools) do n = n + 1 end
            io.stderr:write(("tidepool: mcpServers.%s: answered %d ms after its start: its "
              .. "%d tools are added\n"):format(srv.name, now() - srv.started_at, n))
          end
        else
          srv.state = "failed"
          set_ready(srv, false, "tools/list failed")
          if srv.pid then kill_group(srv, "sigterm") end
        end
        srv.first_done = true
      end)
    end
  end
  local function give_up(why)
    srv.last_err = why
    if not srv.listed and not srv.reported then
      srv.reported = true
      problem("mcpServers.%s: %s", srv.name, why)
    end
    srv.first_done = true
    srv.state = "failed"
    set_ready(srv, false, why)
    kill_group(srv, "sigterm")
  end
  local function initialize()
    srv.era = "legacy"
    request(srv, "initialize", {
      protocolVersion = OFFER, capabilities = {}, clientInfo = CLIENT_INFO,
    }, function(res, err)
      if srv.state ~= "starting" then return end
      if err or type(res) ~= "table" then
        return give_up("initialize failed: " .. (err and tostring(err.message) or "no result"))
      end
      local v = res.protocolVersion
      if not ACCEPTED[v] then
        return give_up(("the server speaks MCP %s; tidepool speaks %s and %s (and %s "
          .. "through server/discover)"):format(tostring(v),
          table.concat(SPOKEN, ", ", 1, #SPOKEN - 1), SPOKEN[#SPOKEN], MODERN))
      end
      srv.version = v
      send(srv, { method = "notifications/initialized" })
      ready()
    end, timeout)
  end
  local answered = false
  srv.era = "modern"
  local probe_timer
  request(srv, "server/discover", {}, function(res, err)
    if answered or srv.state ~= "starting" then return end
    answered = true
    close(probe_timer)
    local versions = type(res) == "table" and res.supportedVersions
    local modern = false
    if type(versions) == "table" then
      for _, v in ipairs(versions) do if v == MODERN then modern = true end end
    end
    if not err and modern then
      srv.era, srv.version = "modern", MODERN
      ready()
    else
      initialize()
    end
  end)
  probe_timer = new_timer(DISCOVER_MS, function()
    if answered or srv.state ~= "starting" then return end
    answered = true
    initialize()
  end)
end

-- Commands that download the server they start (the first time, or each time).
local LAUNCHERS = { npx = true, pnpx = true, bunx = true, uvx = true, pipx = true }

function start_server(srv)
  local cfg = srv.cfg
  srv.state = "starting"
  srv.read_out, srv.read_err = stdout_reader(srv), stderr_reader(srv)
  srv.era = nil
  if srv.url then
    srv.session, srv.version = nil, nil
    return handshake(srv)
  end
  -- npx and its kind fetch the server's package on its first start, which can take tens
  -- of seconds: say so instead of staying silent
  local launcher = type(cfg.command) == "string" and cfg.command:match("([^/]+)$")
  if not srv.announced and LAUNCHERS[launcher] then
    srv.announced = true
    log("info", ("tidepool: starting upstream server %s (%s may be downloading it)")
      :format(srv.name, launcher))
  end
  local stdin, stdout, stderr = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
  local env = {}
  local base = uv.os_environ()
  copy_strings(cfg.env, base)
  for k, v in pairs(base) do env[#env + 1] = k .. "=" .. v end
  local args = {}
  if type(cfg.args) == "table" then
    for _, a in ipairs(cfg.args) do args[#args + 1] = tostring(a) end
  end
  local proc, pid = uv.spawn(cfg.command, {
    args = args, env = env, cwd = type(cfg.cwd) == "string" and cfg.cwd or nil,
    stdio = { stdin, stdout, stderr }, detached = true,
  }, function(code, signal) on_exit(srv, code, signal) end)
  if not proc then
    close(stdin); close(stdout); close(stderr)
    local why = ("cannot start %q: %s"):format(tostring(cfg.command), tostring(pid))
    srv.state = srv.listed and "down" or "failed"
    srv.down_why = why
    srv.restart_at = now() + BACKOFF_MAX_MS
    if not srv.reported then
      srv.reported = true
      problem("mcpServers.%s: %s", srv.name, why)
    end
    srv.first_done = true
    set_ready(srv, false, why)
    return
  end
  srv.proc, srv.pid, srv.stdin = proc, pid, stdin
  stdout:read_start(function(err, chunk)
    if err or not chunk then close(stdout); return end
    srv.read_out(chunk)
  end)
  stderr:read_start(function(err, chunk)
    if err or not chunk then
      srv.read_err(nil)
      close(stderr)
      return
    end
    srv.read_err(chunk)
  end)
  handshake(srv)
end

-- ---- what host.lua calls -------------------------------------------------------------

-- A size from the config: bytes, or text "512K", "4M", "1G" (K = 1024); nil otherwise.
local function size_of(v)
  if math.type(v) == "integer" and v >= 0 then return v end
  if type(v) ~= "string" then return nil end
  local n, unit = v:match("^%s*(%d+)%s*([KkMmGg]?)[iI]?[bB]?%s*$")
  if not n then return nil end
  local mult = ({ k = 1024, m = 1024 ^ 2, g = 1024 ^ 3 })[unit:lower()] or 1
  return math.tointeger(tonumber(n) * mult)
end

-- Reads the mcpServers section and starts every server that is not disabled.
function M.start(section)
  if type(section) ~= "table" then return end
  local names = {}
  for name in pairs(section) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local cfg = section[name]
    if type(cfg) ~= "table" then
      problem("mcpServers.%s: expected an object {\"command\": ..., \"args\": [...]}", name)
    elseif cfg.disabled == true then  -- luacheck: ignore 542
    elseif cfg.command == nil and (type(cfg.url) ~= "string"
                                   or not cfg.url:match("^[hH][tT][tT][pP][sS]?://.")) then
      problem("mcpServers.%s: \"url\" must be an http:// or https:// URL (or give a "
        .. "\"command\")", name)
    elseif cfg.command ~= nil and (type(cfg.command) ~= "string" or cfg.command == "") then
      problem("mcpServers.%s: \"command\" must be a non-empty string", name)
    else
      local id = identifier(name)
      local rename, bad = {}, nil
      if type(cfg.rename) == "table" then
        for raw, to in pairs(cfg.rename) do
          if not is_identifier(to) then bad = bad or ("rename: %q is not a Lua name"):format(
            tostring(to)) end
          rename[raw] = to
        end
      end
      if by_id[id] then
        problem("mcpServers: servers \"%s\" and \"%s\" both become tools.%s; rename one of "
          .. "them in the config", by_id[id].name, name, id)
      elseif bad then
        problem("mcpServers.%s: %s", name, bad)
      else
        local tmo = tonumber(cfg.timeout_ms)
        local msg_max = size_of(cfg.max_message) or MESSAGE_MAX
        local tools_max = cfg.max_tools ~= nil and math.tointeger(tonumber(cfg.max_tools))
                          or TOOLS_MAX
        local desc_max = size_of(cfg.max_descriptions) or DESCRIPTIONS_MAX
        local srv = {
          name = name, id = id, cfg = cfg, rename = rename, eager = cfg.eager == true,
          timeout_ms = tmo and tmo > 0 and tmo or TIMEOUT_MS,
          start_wait_ms = tonumber(cfg.start_wait_ms) and tonumber(cfg.start_wait_ms) >= 0
                          and tonumber(cfg.start_wait_ms) or START_WAIT_MS,
          started_at = now(),
          msg_max = math.max(SMALL, math.min(msg_max, LINE_MAX)),
          tools_max = math.max(0, tools_max), desc_max = desc_max, desc_bytes = 0,
          state = "idle", next_id = 0, pending = {}, progress = {}, waiters = {},
          tools = {}, gone = {}, fails = 0, restart_at = 0, listed = false,
          url = cfg.command == nil and cfg.url or nil, posts = setmetatable({}, { __mode = "k" }),
        }
        servers[#servers + 1] = srv
        by_id[id] = srv
        order[#order + 1] = srv
        start_server(srv)
        -- wakes the start's wait when this server's start_wait_ms ends (M.pending_start)
        if not srv.first_done then  -- unref'd: it keeps no loop alive by itself
          srv.start_timer = new_timer(srv.start_wait_ms, function() srv.start_timer = nil end)
          srv.start_timer:unref()
        end
      end
    end
  end
end

-- True while a server started by M.start has neither listed its tools nor failed.
function M.pending()
  for _, srv in ipairs(servers) do
    if not srv.first_done then return true end
  end
  return false
end

-- The same for a start no caller bounds (tidepool mcp, describe): a server counts only
-- within start_wait_ms of its start, so one that never answers holds nobody up for long.
function M.pending_start()
  local t = now()
  for _, srv in ipairs(servers) do
    if not srv.first_done and t - srv.started_at < srv.start_wait_ms then return true end
  end
  return false
end

-- The unbounded start's wait ended with servers that have not answered: each is a
-- problem; they go on starting, and their tools come once they have listed them.
function M.late_start()
  for _, srv in ipairs(servers) do
    if not srv.first_done then
      srv.late = true
      problem("mcpServers.%s: no answer within %d ms of its start (start_wait_ms): going on "
        .. "without its tools; they are added when it answers", srv.name, srv.start_wait_ms)
    end
  end
end

-- Every server has listed its tools once (they stay registered while it is down): a tool
-- name that none of them has is then surely wrong. A server still starting, or one that
-- never started, may bring more names.
function M.all_listed()
  for _, srv in ipairs(servers) do
    if not srv.listed then return false end
  end
  return true
end

-- The start's wait ended after ms milliseconds (the time limit of the run waiting for it)
-- with servers still starting: each is a problem; they go on starting, and their tools
-- come once they have listed them.
function M.late(ms)
  for _, srv in ipairs(servers) do
    if not srv.first_done then
      srv.late = true
      problem("mcpServers.%s: not ready within %d ms (the time limit of the run waiting for "
        .. "it): its tools are missing until it has started", srv.name, ms)
    end
  end
end

function M.problems()
  local p = problems
  problems = {}
  return p
end

-- Stops every server: stdin closed, SIGTERM to its group after GRACE_MS, SIGKILL after
-- another GRACE_MS; M.stopping() is true until they have all exited.
function M.stop()
  for _, srv in ipairs(servers) do
    close(srv.restart_timer)
    close(srv.start_timer)
    fail_pending(srv, ("the MCP server %s is stopping"):format(srv.name))
    set_ready(srv, false, "tidepool is stopping")
    for req in pairs(srv.posts) do req:cancel() end
    close(srv.listen_timer)
    if srv.url and srv.session then  -- the session is over: DELETE it (a second at most)
      local headers = { ["Mcp-Session-Id"] = srv.session }
      if srv.version then headers["MCP-Protocol-Version"] = srv.version end
      if type(srv.cfg.headers) == "table" then
        for k, v in pairs(srv.cfg.headers) do
          if type(k) == "string" and (type(v) == "string" or type(v) == "number") then
            headers[k] = tostring(v)
          end
        end
      end
      srv.session = nil
      local ok, req = pcall(require("tidepool.http").request, {
        method = "DELETE", url = srv.url, headers = headers, trusted = true, timeout_ms = 1000,
      }, function() srv.deleting = nil end)
      if ok then srv.deleting = req end
    end
    if srv.proc then
      srv.state = "stopping"
      if srv.stdin then srv.stdin:shutdown(function() close(srv.stdin) end) end
      srv.term_timer = new_timer(GRACE_MS, function()
        kill_group(srv, "sigterm")
        srv.kill_timer = new_timer(GRACE_MS, function()
          kill_group(srv, "sigkill")
          -- a process that does not go even then is let go
          srv.give_up_timer = new_timer(GRACE_MS, function()
            close(srv.proc)
            srv.proc = nil
            srv.state = "stopped"
          end)
        end)
      end)
    else
      srv.state = "stopped"
    end
  end
end

function M.stopping()
  for _, srv in ipairs(servers) do
    if srv.proc or srv.deleting then return true end
  end
  return false
end

-- For tests: the servers as the host sees them.
function M.servers() return order end

return M
