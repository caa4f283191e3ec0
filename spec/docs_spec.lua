-- The docs cannot drift: every fenced example of README.md and docs/*.md marked as
-- runnable is run against this build and its output compared exactly; every relative
-- link of those files points at a file (and a heading) that exists. The markers and the
-- masking rules are described in docs/README.md ("Runnable examples"); in short:
--
--   ```sh run        a terminal transcript: "$ cmd" lines (a trailing "\" continues a
--                    command) run in order with sh, each followed by what it prints
--                    (standard output and error, line-buffered as on a terminal);
--                    "$ cat FILE" followed by text writes FILE with that text
--   ```lua run ARGS  a script, run by `tidepool run --json ARGS`; the next fence must be
--   ```json envelope the envelope it prints
--   ```lua module    a program for the Lua module, run by this build's Lua; it must end
--                    without an error (its asserts are its checks)
--   ```c run         a C program, compiled against engine/include and this build's
--                    libtidepool; it must exit 0
--   ```json config   a config file (or a part of one): `tidepool config check` says ok
--                    (with each variable it reads as "env:NAME" set, tidepool on the PATH)
--   ```json file NAME (any language) a file the later runnable blocks of the same
--                    document find in their directory under NAME
--
-- Output is compared line by line after masking what changes from run to run: the
-- numbers of "cpu_ms", "wall_ms", "memory_peak" and "ms"; "..." in an expected line
-- matches any text, and a line that is "..." alone any number of lines. In a json
-- envelope those fields are ignored, and the string "..." matches any value.
local dkjson = require "dkjson"

local H = require("spec.helper")
local shell_quote, read, write = H.shell_quote, H.read, H.write
local ROOT, ABS_BUILD = H.ROOT, H.ABS_BUILD

-- Runs a shell command line; returns its standard output and exit status.
local function sh(cmd)
  local out, _, rc = H.sh(cmd)
  return out, rc
end

-- A fresh directory in which an example runs, with the checkout's directories a reader
-- has beside them (build/ is this build, wherever it is).
local function write_file(dir, name, text)
  if name:match("/") then sh("mkdir -p " .. shell_quote(dir .. "/" .. name:match("^(.*)/"))) end
  write(dir .. "/" .. name, text)
end

local function sandbox_dir(files)
  local dir = sh("mktemp -d"):gsub("\n$", "")
  local links = { "examples", "tools", "spec", "lua", "engine", "bench", "doc" }
  local cmd = { "cd " .. shell_quote(dir), "ln -s " .. shell_quote(ABS_BUILD) .. " build" }
  for _, l in ipairs(links) do
    cmd[#cmd + 1] = "ln -s " .. shell_quote(ROOT .. "/" .. l) .. " " .. l
  end
  local _, rc = sh(table.concat(cmd, " && "))
  assert(rc == 0, "cannot prepare " .. dir)
  for name, text in pairs(files or {}) do write_file(dir, name, text) end
  return dir
end

local function remove_dir(dir)
  sh("rm -rf " .. shell_quote(dir))
end

-- ---- reading the docs ------------------------------------------------------------

local function doc_files()
  local files = { "README.md" }
  for f in sh("ls docs/*.md"):gmatch("[^\n]+") do files[#files + 1] = f end
  return files
end

-- The fenced blocks of a markdown text: { info, text, line } in order (line: the fence's).
local function fences(text)
  local blocks, cur = {}, nil
  local n = 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    if cur then
      if line:match("^```%s*$") then
        blocks[#blocks + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    else
      local info = line:match("^```(.*)$")
      if info then cur = { info = info:match("^%s*(.-)%s*$"), lines = {}, line = n } end
    end
  end
  for _, b in ipairs(blocks) do b.text = table.concat(b.lines, "\n") .. "\n" end
  return blocks
end

-- ---- comparing -------------------------------------------------------------------

local VOLATILE = { cpu_ms = true, wall_ms = true, memory_peak = true, ms = true }

local function mask(line)
  return (line:gsub('"([%w_]+)":(%-?[%d.eE+-]+)', function(k, v)
    if VOLATILE[k] then return '"' .. k .. '":N' end
    return '"' .. k .. '":' .. v
  end))
end

-- An expected line as an anchored Lua pattern: "..." matches any text.
local function line_pattern(expected)
  local parts, at = {}, 1
  while true do
    local s, e = expected:find("...", at, true)
    local piece = expected:sub(at, (s or 0) - 1)
    parts[#parts + 1] = piece:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")
    if not s then break end
    at = e + 1
  end
  return "^" .. table.concat(parts, ".-") .. "$"
end

-- Expected lines against actual lines; a line "..." alone matches any number of lines.
local function lines_match(exp, act, i, j)
  i, j = i or 1, j or 1
  if i > #exp then return j > #act end
  if exp[i] == "..." then
    for k = j, #act + 1 do
      if lines_match(exp, act, i + 1, k) then return true end
    end
    return false
  end
  if j > #act then return false end
  if not mask(act[j]):match(line_pattern(mask(exp[i]))) then return false end
  return lines_match(exp, act, i + 1, j + 1)
end

local function split_lines(s)
  local t = {}
  for l in s:gmatch("([^\n]*)\n") do t[#t + 1] = l:gsub("%s+$", "") end
  local last = s:match("([^\n]+)$")
  if last then t[#t + 1] = last:gsub("%s+$", "") end
  return t
end

-- JSON as one canonical text (keys sorted), for messages.
local function canon(v)
  local t = type(v)
  if v == dkjson.null then return "null" end
  if t == "table" then
    local mt = getmetatable(v)
    if (mt and mt.__jsontype == "array") or (#v > 0 and next(v, #v) == nil) then
      local out = {}
      for i = 1, #v do out[i] = canon(v[i]) end
      return "[" .. table.concat(out, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    local out = {}
    for i, k in ipairs(keys) do out[i] = dkjson.encode(k) .. ":" .. canon(v[k]) end
    return "{" .. table.concat(out, ",") .. "}"
  end
  if t == "number" and math.type(v) == "float" and v == math.floor(v) and v < 2^53 then
    return string.format("%.1f", v)
  end
  return dkjson.encode(v)
end

-- Replaces the volatile fields by "<volatile>" and, where the expected side says "...",
-- the actual value by "...": what is left must be equal.
local function json_masked(exp, act)
  if exp == "..." then return "..." end
  if type(exp) ~= "table" or type(act) ~= "table" or exp == dkjson.null or act == dkjson.null then
    return act
  end
  local out = setmetatable({}, getmetatable(act))
  for k, v in pairs(act) do
    if VOLATILE[k] and type(v) == "number" then out[k] = "<volatile>"
    else out[k] = json_masked(exp[k], v) end
  end
  return out
end

local function json_strip(v)
  if type(v) ~= "table" or v == dkjson.null then return v end
  local out = setmetatable({}, getmetatable(v))
  for k, x in pairs(v) do
    if VOLATILE[k] and type(x) == "number" then out[k] = "<volatile>"
    else out[k] = json_strip(x) end
  end
  return out
end

local function decode(text, what)
  local v, _, err = dkjson.decode(text, 1, dkjson.null)
  assert(v ~= nil, what .. " is not JSON (" .. tostring(err) .. "): " .. text)
  return v
end

-- ---- running ---------------------------------------------------------------------

-- A "sh run" block as steps: { cmd = "...", out = { lines } } or { file = NAME, text }.
local function transcript(text)
  local steps, cur = {}, nil
  local lines = split_lines(text)
  local i = 1
  while i <= #lines do
    local l = lines[i]
    local cmd = l:match("^%$ (.*)$")
    if cmd then
      while cmd:match("\\$") and i < #lines do
        i = i + 1
        cmd = cmd .. "\n" .. lines[i]
      end
      cur = { cmd = cmd, out = {} }
      steps[#steps + 1] = cur
    else
      assert(cur, "a transcript starts with a \"$ \" command: " .. l)
      cur.out[#cur.out + 1] = l
    end
    i = i + 1
  end
  return steps
end

local function run_transcript(block, where)
  local dir = sandbox_dir(block.files)
  local env = "PATH=" .. shell_quote(ABS_BUILD) .. ":\"$PATH\" "
  if (os.getenv("SANITIZE") or "") ~= "" then  -- stdbuf preloads a library before ASan's
    env = env .. "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" "
  end
  local ok, err = pcall(function()
    for _, step in ipairs(transcript(block.text)) do
      local file = step.cmd:match("^cat ([%w_./-]+)$")
      if file then
        write_file(dir, file, table.concat(step.out, "\n") .. "\n")
      else
        local out = sh("cd " .. shell_quote(dir) .. " && " .. env .. "timeout 60 stdbuf -oL -eL "
          .. "sh -c " .. shell_quote(step.cmd) .. " 2>&1")
        local act = split_lines(out)
        if not lines_match(step.out, act) then
          error(string.format("%s: $ %s\nexpected:\n%s\ngot:\n%s", where, step.cmd,
            table.concat(step.out, "\n"), table.concat(act, "\n")), 0)
        end
      end
    end
  end)
  remove_dir(dir)
  if not ok then error(err, 0) end
end

local function run_script(block, envelope, where)
  local dir = sandbox_dir(block.files)
  local args = block.info:match("^lua run%s*(.*)$")
  local ok, err = pcall(function()
    write(dir .. "/script.lua", block.text)
    local out = sh("cd " .. shell_quote(dir) .. " && timeout 60 build/tidepool run --json "
      .. args .. " script.lua 2>/dev/null")
    local exp = decode(envelope.text, where .. ": the json envelope")
    local act = decode(out, where .. ": what tidepool printed")
    local e, a = canon(json_strip(exp)), canon(json_masked(exp, json_strip(act)))
    if e ~= a then
      error(string.format("%s: the envelope differs\nexpected: %s\ngot:      %s", where, e, a), 0)
    end
  end)
  remove_dir(dir)
  if not ok then error(err, 0) end
end

local function run_module(block, where)
  local dir = sandbox_dir(block.files)
  local ok, err = pcall(function()
    write(dir .. "/example.lua", block.text)
    local out, rc = sh("cd " .. shell_quote(dir) .. " && LUA_CPATH='build/lua/?.so;;' "
      .. "timeout 60 build/lua/lua example.lua 2>&1")
    if rc ~= 0 then error(where .. ": exit " .. tostring(rc) .. ": " .. out, 0) end
  end)
  remove_dir(dir)
  if not ok then error(err, 0) end
end

local function run_config(block, where)
  local dir = sandbox_dir(block.files)
  local ok, err = pcall(function()
    write(dir .. "/config.json", block.text)
    local vars = {}  -- the variables it reads with "env:NAME", set as a reader would set them
    for name in block.text:gmatch('"env:([%w_]+)"') do vars[#vars + 1] = name .. "=example" end
    vars[#vars + 1] = "PATH=" .. shell_quote(ABS_BUILD) .. ":\"$PATH\""  -- tidepool is installed
    local out, rc = sh("cd " .. shell_quote(dir) .. " && " .. table.concat(vars, " ")
      .. " timeout 60 build/tidepool config check config.json 2>&1")
    if rc ~= 0 or not out:match("^config%.json: ok") then
      error(where .. ": tidepool config check: exit " .. tostring(rc) .. ": " .. out, 0)
    end
  end)
  remove_dir(dir)
  if not ok then error(err, 0) end
end

local function run_c(block, where)
  local dir = sandbox_dir(block.files)
  local ok, err = pcall(function()
    write(dir .. "/example.c", block.text)
    local san = os.getenv("SANITIZE") or ""  -- make sanitize: the library needs the runtimes
    if san ~= "" then san = "-fsanitize=" .. shell_quote(san) .. " " end
    local out, rc = sh("cd " .. shell_quote(dir) .. " && cc -std=c11 -Wall -Werror " .. san
      .. "-o example "
      .. "example.c -Iengine/include -Lbuild -Wl,-rpath," .. shell_quote(ABS_BUILD)
      .. " -ltidepool 2>&1 && timeout 60 ./example 2>&1")
    if rc ~= 0 then error(where .. ": exit " .. tostring(rc) .. ": " .. out, 0) end
  end)
  remove_dir(dir)
  if not ok then error(err, 0) end
end

-- ---- the examples ----------------------------------------------------------------

local RUNNABLE = { ["sh run"] = true, ["lua module"] = true, ["c run"] = true,
                   ["json config"] = true }

describe("the docs' matching rules", function()
  it("mask the volatile numbers and nothing else", function()
    assert.equal('{"cpu_ms":N,"calls":3,"ms":N}', mask('{"cpu_ms":0.021,"calls":3,"ms":12}'))
  end)
  it("match ... within a line and as whole lines, and refuse what differs", function()
    assert.is_true(lines_match({ 'a {...} b' }, { 'a {"x":1} b' }))
    assert.is_false(lines_match({ 'a {...} b' }, { 'a {"x":1} c' }))
    assert.is_true(lines_match({ "x", "...", "z" }, { "x", "1", "2", "z" }))
    assert.is_true(lines_match({ "x", "...", "z" }, { "x", "z" }))
    assert.is_false(lines_match({ "x", "z" }, { "x", "y", "z" }))
    assert.is_false(lines_match({ "x" }, { "x", "y" }))
    assert.is_false(lines_match({ "50%" }, { "50x" }))
    assert.is_true(lines_match({ "end." }, { "end." }))
    assert.is_false(lines_match({ "end." }, { "end" }))
    assert.is_true(lines_match({ "...a...b..." }, { "xaybz" }))
  end)
  it("compare envelopes exactly but for volatile fields and \"...\"", function()
    local exp = decode('{"ok":true,"result":[1,2],"stats":{"wall_ms":1},"x":"..."}', "e")
    local act = decode('{"ok":true,"result":[1,2],"stats":{"wall_ms":7.5},"x":{"a":1}}', "a")
    assert.equal(canon(json_strip(exp)), canon(json_masked(exp, json_strip(act))))
    local act2 = decode('{"ok":true,"result":[1,3],"stats":{"wall_ms":7.5},"x":1}', "a")
    assert.not_equal(canon(json_strip(exp)), canon(json_masked(exp, json_strip(act2))))
    assert.not_equal(canon(decode("[]", "e")), canon(decode("{}", "a")))
  end)
  it("read a transcript's commands, continuations, files and outputs", function()
    local steps = transcript("$ cat a.lua\nreturn 1\n$ x \\\n  y\n1\n2\n")
    assert.same({ { cmd = "cat a.lua", out = { "return 1" } },
                  { cmd = "x \\\n  y", out = { "1", "2" } } }, steps)
  end)
end)

local count = 0
for _, file in ipairs(doc_files()) do
  local blocks = fences(read(file))
  describe(file, function()
    local files = {}
    for i, b in ipairs(blocks) do
      local where = file .. ":" .. b.line
      local name = b.info:match("^%S+ file (%S+)$")
      if name then  -- a new table: the blocks before this one keep what they saw
        local more = { [name] = b.text }
        for k, v in pairs(files) do more[k] = more[k] or v end
        files = more
      end
      b.files = files
      local kind = b.info:match("^lua run") and "lua run" or b.info
      if kind == "lua run" then
        count = count + 1
        it(where .. " lua run, and its envelope", function()
          local nxt = blocks[i + 1]
          assert(nxt and nxt.info == "json envelope",
            where .. ": a \"lua run\" block is followed by a \"json envelope\" block")
          run_script(b, nxt, where)
        end)
      elseif RUNNABLE[kind] then
        count = count + 1
        it(where .. " " .. kind, function()
          if kind == "sh run" then run_transcript(b, where)
          elseif kind == "lua module" then run_module(b, where)
          elseif kind == "json config" then run_config(b, where)
          else run_c(b, where) end
        end)
      elseif kind == "json envelope" then
        it(where .. " json envelope follows a lua run block", function()
          assert(blocks[i - 1] and blocks[i - 1].info:match("^lua run"),
            where .. ": a \"json envelope\" block stands after a \"lua run\" block")
        end)
      end
    end

    it("links to files and headings that exist", function()
      local text = read(file)
      local base = file:match("^(.*)/") or "."
      local bad = {}
      for target in text:gmatch("%]%(([^)%s]+)%)") do
        if not target:match("^%a[%w+.-]*:") then
          local path, anchor = target:match("^([^#]*)#?(.*)$")
          local full = path == "" and file or base .. "/" .. path
          local f = io.open(full, "rb")
          if not f then
            bad[#bad + 1] = target .. " (no such file)"
          else
            local body = f:read("a")
            f:close()
            if anchor ~= "" and full:match("%.md$") then
              local found = false
              for h in body:gmatch("\n#+ ([^\n]+)") do
                local slug = h:lower():gsub("[^%w%s_-]", ""):gsub("%s", "-")
                if slug == anchor then found = true end
              end
              if not found then bad[#bad + 1] = target .. " (no such heading)" end
            end
          end
        end
      end
      assert.same({}, bad)
    end)

    it("points to no file outside the repository (../shared is not in a user's checkout)",
      function()
      local outside = {}
      for ref in read(file):gmatch("%.%./shared/[%w_./-]+") do
        if not ref:match("^%.%./shared/json%-schema%-test%-suite") then  -- a test input, fetched
          outside[#outside + 1] = ref
        end
      end
      assert.same({}, outside)
    end)
  end)
end

describe("the docs", function()
  it("hold runnable examples (the extractor found them)", function()
    assert.is_true(count >= 10, "only " .. count .. " runnable examples found")
  end)
end)

-- ---- the man page and --help, written from the code's tables ---------------------

local BIN = ABS_BUILD .. "/tidepool"

-- The entries ("  TERM ...") of the --help block under the header matching pattern.
local function help_block(text, header)
  local terms, inblock = {}, false
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if inblock then
      if line == "" then break end
      local term = line:match("^  ([^ ]+)")
      if term then terms[#terms + 1] = term end
    elseif line:match(header) then
      inblock = true
    end
  end
  return terms
end

describe("the man page and --help", function()
  local help = sh(shell_quote(BIN) .. " --help")
  local mcp_help = sh(shell_quote(BIN) .. " mcp --help")
  local codes = help_block(help, "^error codes")
  local statuses = help_block(help, "^exit status")

  it("--help lists the error codes and exit statuses of the code's tables", function()
    assert.equal("syntax", codes[1])
    assert.is_true(#codes >= 21, #codes .. " codes")
    assert.same({ "0", "1", "2", "3" }, statuses)
  end)

  it("README lists exactly the error codes --help lists, in its order", function()
    local text = read("README.md")
    local para = text:match("Error codes are stable strings: (.-)%. Messages")
    assert(para, "README.md: no \"Error codes are stable strings: ...\" paragraph")
    local listed = {}
    for c in para:gmatch("`([%w_.]+)`") do
      if c:match("^%l[%w_]*%.?[%w_]*$") and c ~= "retry_after_ms" then listed[#listed + 1] = c end
    end
    assert.same(codes, listed)
  end)

  it("is written by scripts/man.sh with every flag, error code and exit status", function()
    local out = os.tmpname()
    local _, rc = sh("sh scripts/man.sh " .. shell_quote(BIN) .. " doc/tidepool.1.in "
      .. shell_quote(out) .. " /usr/share/tidepool 2>&1")
    assert.equal(0, rc)
    local page = read(out)
    os.remove(out)
    assert.is_nil(page:find("LuaCATS", 1, true))
    local missing = {}
    local function need(word)
      if not page:find(word:gsub("%-", "\\-"), 1, true) then missing[#missing + 1] = word end
    end
    for flag in (help .. mcp_help):gmatch("%-%-[%a][%w-]*") do need(flag) end
    for _, c in ipairs(codes) do need("\\fB" .. c .. "\\fR") end
    for _, s in ipairs(statuses) do need("\\fB" .. s .. "\\fR") end
    assert.same({}, missing)
  end)

  it("mcp --help gives one default for --max-result, and docs/mcp.md says the same", function()
    local def = mcp_help:match("%-%-max%-result SIZE [^\n]-%(default (%w+)%)")
    assert.truthy(def, "no --max-result line in mcp --help")
    assert.not_equal(help:match("%-%-max%-result SIZE [^\n]-%(default (%w+)%)"), def)
    assert.is_nil(mcp_help:match("defaults to %w+ here"))
    assert.truthy(read("docs/mcp.md"):find("`--max-result` is " .. def .. " here", 1, true))
  end)

  it("docs/cli.md and docs/mcp.md name every option of their command's --help", function()
    local missing = {}
    local function check(doc, text)
      local body = read(doc)
      local seen = {}
      for flag in text:gmatch("\n  (%-%-[%a][%w-]*)") do
        if not seen[flag] and not body:find("`" .. flag, 1, true) then
          missing[#missing + 1] = doc .. ": " .. flag
        end
        seen[flag] = true
      end
    end
    check("docs/cli.md", help)
    check("docs/mcp.md", mcp_help)
    assert.same({}, missing)
  end)
end)
