-- gate.wait{path}: waits (polling every 10 ms, without blocking other runs) until the file
-- path exists, then returns {opened = true}. spec/mcp/caller_tools.mjs opens the gate
-- (writes the file) to decide, without timing, when a branch of a script goes on.
return {
  name = "gate.wait",
  description = "Waits until the file path exists.",
  input = {
    type = "object",
    properties = { path = { type = "string", minLength = 1 } },
    required = { "path" },
  },
  handler = function(args, ctx)
    while true do
      local f = io.open(args.path, "r")
      if f then f:close() return { opened = true } end
      ctx.sleep(10)
    end
  end,
}
