-- A script a model might write: summarize some records and return a small report.
-- Run it with:  build/tidepool run examples/report.lua
local orders = json.decode([[
  [{"id": 1, "customer": "ada",   "total": 120.5, "items": 3},
   {"id": 2, "customer": "bob",   "total": 40,    "items": 1},
   {"id": 3, "customer": "ada",   "total": 75.25, "items": 2},
   {"id": 4, "customer": "cy",    "total": 310,   "items": 7}]
]])

local by_customer, revenue = {}, 0
for _, o in ipairs(orders) do
  by_customer[o.customer] = (by_customer[o.customer] or 0) + o.total
  revenue = revenue + o.total
end

local ranking = {}
for name, total in pairs(by_customer) do ranking[#ranking + 1] = { name = name, total = total } end
table.sort(ranking, function(a, b) return a.total > b.total end)

print(string.format("%d orders, revenue %.2f", #orders, revenue))
return { revenue = revenue, top_customer = ranking[1].name, ranking = ranking }
