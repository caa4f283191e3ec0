-- examples/plugin/tools/units.lua: a plugin tool, as a plugin author writes one.
-- tidepool run --tools examples/plugin/tools script.lua   (or --config with "tools")
-- Its test, examples/plugin/units_spec.lua, runs it through the Lua module with busted.

local FACTORS = {  -- to metres, kilograms or seconds
  m = 1, km = 1000, cm = 0.01, mi = 1609.344, ft = 0.3048,
  kg = 1, g = 0.001, lb = 0.45359237,
  s = 1, min = 60, h = 3600,
}
local KIND = { m = "length", km = "length", cm = "length", mi = "length", ft = "length",
               kg = "mass", g = "mass", lb = "mass", s = "time", min = "time", h = "time" }

local units = {}
for u in pairs(FACTORS) do units[#units + 1] = u end
table.sort(units)

return {
  name = "units.convert",
  description = "Converts a value between units of length, mass or time.",
  input = {
    type = "object",
    properties = {
      value = { type = "number" },
      from = { enum = units },
      to = { enum = units },
    },
    required = { "value", "from", "to" },
    additionalProperties = false,
  },
  output = {
    type = "object",
    properties = { value = { type = "number" }, unit = { type = "string" } },
    required = { "value", "unit" },
  },
  handler = function(args, ctx)
    if KIND[args.from] ~= KIND[args.to] then
      -- a table error keeps this file's position out of the message the script reads
      error({ message = ("cannot convert %s (%s) to %s (%s)"):format(
        args.from, KIND[args.from], args.to, KIND[args.to]) }, 0)
    end
    ctx.log(("%g %s -> %s"):format(args.value, args.from, args.to))
    return { value = args.value * FACTORS[args.from] / FACTORS[args.to], unit = args.to }
  end,
}
