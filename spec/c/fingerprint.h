/*
** fingerprint.h: the start of a script that prints what a script can see in a sandbox,
** for the tests that compare a pooled or lazy sandbox with a fresh, full one
** (test_pool.c, test_lazy.c): every global, library field and metatable (depth 3), the
** string metatable, and what library functions keep between calls (math.random's
** generator, json.encode's buffer, tostring's display numbers). Each test adds its own
** last lines and `return table.concat(out, '\n')`.
*/
#ifndef TP_FINGERPRINT_H
#define TP_FINGERPRINT_H

#define TP_FINGERPRINT_START \
  "local out = {}\n" \
  "local function add(s) out[#out + 1] = s end\n" \
  "local function show(v)\n" \
  "  local t = type(v)\n" \
  "  if t == 'number' or t == 'boolean' then return t .. ':' .. tostring(v) end\n" \
  "  if t == 'string' then return 'string:' .. v:gsub('[^ -~]', function(c) return '\\\\' .. c:byte() end) end\n" \
  "  return t\n" \
  "end\n" \
  "local seen = {}\n" \
  "local function walk(name, t, depth)\n" \
  "  if seen[t] or depth > 3 then return end\n" \
  "  seen[t] = true\n" \
  "  local ks = {}\n" \
  "  for k in pairs(t) do ks[#ks + 1] = k end\n" \
  "  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)\n" \
  "  add(name .. ' #' .. #ks .. ' mt=' .. show(getmetatable(t)))\n" \
  "  for _, k in ipairs(ks) do\n" \
  "    local v = rawget(t, k)\n" \
  "    if v == nil then v = t[k] end\n" \
  "    add(name .. '.' .. tostring(k) .. '=' .. show(v))\n" \
  "    if type(v) == 'table' then walk(name .. '.' .. tostring(k), v, depth + 1) end\n" \
  "  end\n" \
  "end\n" \
  "walk('_G', _G, 0)\n" \
  "local smt = getmetatable('')\n" \
  "add('smt=' .. show(smt))\n" \
  "if type(smt) == 'table' then walk('smt', smt, 0) end\n" \
  "add('smt.__index==string ' .. tostring(rawequal(smt and smt.__index, string)))\n" \
  "add('upper ' .. ('abc'):upper() .. ' ' .. tostring(('10') + 1))\n" \
  "add('json.null mt ' .. show(getmetatable(json.null)))\n" \
  "add('json ' .. json.encode({ a = { 1, 2.5, 'x' }, b = json.null }))\n" \
  "add('decode ' .. json.decode('[1,2,3]')[3])\n" \
  "math.randomseed(7)\n" \
  "add('random ' .. math.random(1, 1000000) .. ' ' .. math.random(1, 1000000))\n" \
  "add('ids ' .. tostring({}) .. ' ' .. tostring(print) .. ' ' .. tostring(tools))\n"

#endif
