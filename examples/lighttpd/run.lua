-- A lighttpd mod_magnet handler (lighttpd 1.4.65 or later; Debian's lighttpd-modules-lua,
-- which runs it on Debian's Lua 5.4.4) that runs the Lua script POSTed to it in a tidepool
-- sandbox, with the built-in tools and a workspace for the fs.* tools, and answers with
-- the run's envelope as JSON:
--   curl --data-binary 'return tools.kv.get{key = "a"}' http://127.0.0.1:8080/run
-- The module talks to lighttpd's Lua only through its C API and runs the script on its
-- own Lua 5.4.7. Its engines live as long as this script's Lua state in lighttpd, so the
-- kv.* store lasts across requests. A run holds lighttpd's one thread while it runs: the
-- limits below bound that.
local tidepool = require("tidepool")

local OPTIONS = {
  builtin_tools = true,
  workspace = os.getenv("TIDEPOOL_WORKSPACE") or "/var/lib/tidepool/workspace",
  workspace_max = "64M",
  timeout = "1s",       -- wall-clock time: limit.time
  cpu = "2s",           -- never first for a loop: the wall clock reaches 1 s before
  memory = "32M",
  tool_calls = 100,
  max_output = "64K",
  json = true,          -- the envelope as JSON text, as the engine writes it
}

local r = lighty.r
if r.req_attr["request.method"] ~= "POST" then
  r.resp_header["Allow"] = "POST"
  r.resp_body.set({ "POST a Lua script to run\n" })
  return 405
end
-- lighttpd reads the body after this returns 0, then runs this script again
local collected = r.req_body.collect
if collected == false then return 0 end
if not collected then return 500 end

-- lighttpd 1.4.69 (Debian 12) returns a body that came in the same read as the headers
-- with the headers in front of it (the whole read buffer): the body is its last len bytes.
local body, len = r.req_body.get or "", r.req_body.len
if #body > len then body = body:sub(-len) end

local envelope = tidepool.run(body, OPTIONS)
r.resp_header["Content-Type"] = "application/json"
r.resp_body.set({ envelope, "\n" })
return 200
