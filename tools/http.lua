-- tools/http.lua: http.fetch, an HTTP request from a script under the config's egress
-- policy (engine/host/http.c does the request and the policy; this file shapes arguments
-- and results). Offered only when the config has an "http" section; a section that does
-- not compile (an inject variable missing from the environment) is a load problem.
--
-- The result is {status, headers, body, truncated, url}. A body that is JSON stays a
-- string (the script decodes it with json.decode). A body that is not UTF-8 comes as
-- base64, with encoding = "base64". Refusals are tool.denied, time caps tool.timeout,
-- other failures tool.failed; their messages name the URL and the rule.

local load_opts = ...
local config = type(load_opts) == "table" and load_opts.config or nil
if type(config) ~= "table" or config.http == nil then return {} end

local http = require("tidepool.http")
local ok, why = http.check_config()
if not ok then  -- a problem of the config (its JSON path), not of this file: no tools
  load_opts.warn(why)
  return {}
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function base64(s)
  local out, n = {}, #s
  for i = 1, n, 3 do
    local a, b, c = s:byte(i, i + 2)
    local v = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = {}
    for k = 1, 4 do
      local idx = (v >> (6 * (4 - k))) & 63
      q[k] = B64:sub(idx + 1, idx + 1)
    end
    if not b then q[3], q[4] = "=", "="
    elseif not c then q[4] = "=" end
    out[#out + 1] = table.concat(q)
  end
  return table.concat(out)
end

-- A truncated body may end inside a UTF-8 sequence: that tail is dropped, not the body.
local function utf8_text(body, truncated)
  if utf8.len(body) then return body end
  if truncated then
    for cut = 1, 3 do
      local head = body:sub(1, #body - cut)
      if utf8.len(head) then return head end
    end
  end
  return nil
end

local METHODS = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS" }

return {
  name = "http.fetch",
  description = "An HTTP(S) request to a host the configuration allows (http.allow). "
    .. "Returns the status, the response headers (names in lower case), the body as a "
    .. "string (decode JSON with json.decode) and whether it was cut at max_bytes. "
    .. "Redirects are followed (each target must be allowed too). Errors: tool.denied "
    .. "(host, method or address not allowed), tool.timeout, tool.failed.",
  input = {
    type = "object",
    properties = {
      url = { type = "string", minLength = 1, maxLength = 8192,
              description = "http:// or https:// URL." },
      method = { type = "string", enum = METHODS, description = "Default GET." },
      headers = { type = "object", additionalProperties = { type = "string" },
                  description = "Request headers, e.g. {Accept = \"application/json\"}." },
      body = { type = "string", description = "Request body, sent as is." },
      timeout_ms = { type = "integer", minimum = 1,
                     description = "Time cap for the whole request (the config caps it)." },
      max_bytes = { type = "integer", minimum = 0,
                    description = "Most body bytes returned (the config caps it)." },
    },
    required = { "url" },
    additionalProperties = false,
  },
  output = {
    type = "object",
    properties = {
      status = { type = "integer", description = "HTTP status code, e.g. 200." },
      headers = { type = "object", additionalProperties = { type = "string" } },
      body = { type = "string" },
      truncated = { type = "boolean", description = "The body was cut at max_bytes." },
      url = { type = "string", description = "The final URL, after redirects." },
      encoding = { type = "string", enum = { "base64" },
                   description = "Present when the body is not UTF-8 text: it is base64." },
    },
    required = { "status", "headers", "body", "truncated" },
    additionalProperties = false,
  },
  timeout_ms = 600000,  -- the request's own cap (timeout_ms, http.timeout_ms) decides
  handler = function(args, ctx)
    local res = ctx.http({
      url = args.url, method = args.method, headers = args.headers, body = args.body,
      timeout_ms = args.timeout_ms, max_bytes = args.max_bytes,
    })
    local out = { status = res.status, headers = res.headers, truncated = res.truncated,
                  url = res.url }
    local text = utf8_text(res.body, res.truncated)
    if text then out.body = text else out.body, out.encoding = base64(res.body), "base64" end
    return out
  end,
}
