-- probe.wait{ms, tag}: waits ms milliseconds; when its call ends before that (the run was
-- cancelled), appends "<tag> cancelled" to the file $TP_PROBE_FILE. spec/mcp/http.mjs uses
-- it to see that a client closing its connection cancels the run's tool call.
return {
  name = "probe.wait",
  description = "Waits ms milliseconds; records a cancellation in $TP_PROBE_FILE.",
  input = {
    type = "object",
    properties = { ms = { type = "integer", minimum = 0 }, tag = { type = "string" } },
    required = { "ms" },
  },
  handler = function(args, ctx)
    local state = { finished = false }
    -- ctx.track closes what it is given when the call ends, cancelled or not
    ctx.track({
      is_closing = function() return false end,
      close = function()
        if state.finished then return end
        local f = io.open(os.getenv("TP_PROBE_FILE"), "a")
        if f then
          f:write((args.tag or "") .. " cancelled\n")
          f:close()
        end
      end,
    })
    ctx.sleep(args.ms)
    state.finished = true
    return { slept = true }
  end,
}
