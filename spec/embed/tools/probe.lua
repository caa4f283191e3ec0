-- Plugins for spec/embed/foreign_lua.c. probe.number uses luv (ctx.sleep waits on a luv
-- timer) and lpeg, the two C libraries of the host state, so a program that links
-- another Lua proves they run on tidepool's own Lua too. probe.cmodule tries to load a Lua
-- C module (Debian's lfs), which would bind to the program's Lua: it must be refused.
local lpeg = require("lpeg")

local digits = lpeg.C(lpeg.R("09") ^ 1) / tonumber

return {
  {
    name = "probe.number",
    description = "Waits ms milliseconds, then parses the leading digits of text with lpeg.",
    input = { type = "object", required = { "text", "ms" },
              properties = { text = { type = "string" },
                             ms = { type = "integer", minimum = 0 } } },
    handler = function(args, ctx)
      ctx.sleep(args.ms)
      return { n = digits:match(args.text) }
    end,
  },
  {
    name = "probe.cmodule",
    description = "Tries require(name); returns whether it loaded, and the error if not.",
    input = { type = "object", required = { "name" },
              properties = { name = { type = "string" } } },
    handler = function(args)
      local ok, m = pcall(require, args.name)
      return { loaded = ok, why = ok and type(m) or tostring(m) }
    end,
  },
}
