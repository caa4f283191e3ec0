-- Built-in tools: the clock, and a pause that does not block other runs.
local uv = require("luv")

local function now_ms()
  local sec, usec = uv.gettimeofday()
  return sec * 1000 + usec // 1000
end

return {
  {
    name = "time.now",
    description = "The current time: milliseconds since the Unix epoch and the same "
      .. "instant as an ISO 8601 string in UTC.",
    input = { type = "object", properties = {}, additionalProperties = false },
    output = {
      type = "object",
      properties = {
        unix_ms = { type = "integer", description = "Milliseconds since 1970-01-01T00:00:00Z." },
        iso = { type = "string", format = "date-time",
                description = "UTC, e.g. 2026-03-01T14:05:09.123Z." },
      },
      required = { "unix_ms", "iso" },
      additionalProperties = false,
    },
    handler = function()
      local ms = now_ms()
      local iso = os.date("!%Y-%m-%dT%H:%M:%S", ms // 1000) .. (".%03dZ"):format(ms % 1000)
      return { unix_ms = ms, iso = iso }
    end,
  },
  {
    name = "time.sleep",
    description = "Waits the given number of milliseconds, then returns how long it "
      .. "waited. Other tool calls (e.g. in parallel) go on meanwhile.",
    input = {
      type = "object",
      properties = {
        ms = { type = "integer", minimum = 0, maximum = 60000,
               description = "How long to wait, in milliseconds (0 to 60000)." },
      },
      required = { "ms" },
      additionalProperties = false,
    },
    output = {
      type = "object",
      properties = {
        slept_ms = { type = "integer", minimum = 0,
                     description = "Milliseconds actually waited." },
      },
      required = { "slept_ms" },
      additionalProperties = false,
    },
    timeout_ms = 61000,
    handler = function(args, ctx)
      local t0 = uv.hrtime()
      ctx.sleep(args.ms)
      return { slept_ms = math.floor((uv.hrtime() - t0) / 1e6) }
    end,
  },
}
