-- A script a model might write, using the built-in tools: file some orders in the
-- key-value store, read them back in parallel, and return a small report.
-- Run it with:  build/tidepool run examples/report.lua   (or: make run)
local orders = json.decode([[
  [{"id": 1, "customer": "ada",   "total": 120.5, "items": 3},
   {"id": 2, "customer": "bob",   "total": 40,    "items": 1},
   {"id": 3, "customer": "ada",   "total": 75.25, "items": 2},
   {"id": 4, "customer": "cy",    "total": 310,   "items": 7}]
]])

for _, o in ipairs(orders) do
  tools.kv.set{ key = "order:" .. o.id, value = o }
end

-- read them all back at once: the four calls are in flight together
local keys = tools.kv.list{ prefix = "order:" }.keys
local readers = {}
for i, key in ipairs(keys) do
  readers[i] = function() return tools.kv.get{ key = key }.value end
end
local stored = { parallel(table.unpack(readers)) }

local by_customer, revenue = {}, 0
for _, o in ipairs(stored) do
  by_customer[o.customer] = (by_customer[o.customer] or 0) + o.total
  revenue = revenue + o.total
end
local ranking = {}
for name, total in pairs(by_customer) do ranking[#ranking + 1] = { name = name, total = total } end
table.sort(ranking, function(a, b) return a.total > b.total end)

local missing = pcall(tools.kv.get, { key = "" })  -- a bad argument: caught, not fatal
print(string.format("%d orders, revenue %.2f", #stored, revenue))
return {
  at = tools.time.now{}.iso,
  revenue = revenue,
  top_customer = ranking[1].name,
  ranking = ranking,
  bad_key_accepted = missing,
}
