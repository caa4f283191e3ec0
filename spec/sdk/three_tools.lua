-- The script of the SDK tests (spec/sdk/*.mjs, sdk/python/tests): three of the user's
-- tools, one async (weather), one that throws (explode), one called in a loop and in
-- parallel() (add).
local w = tools.weather{ city = "Paris" }
local ok, err = pcall(tools.explode, { why = "boom" })
local sum = 0
for i = 1, 3 do sum = sum + tools.add{ a = i, b = 10 }.sum end
local p1, p2 = parallel(function() return tools.add{ a = 100, b = 1 } end,
                        function() return tools.add{ a = 200, b = 2 } end)
return { temp = w.temp_c, ok = ok, code = err.code, message = err.message,
         sum = sum, par = { p1.sum, p2.sum } }
