-- The fs.* tools' budgets (engine/host/fs.c, tools/fs.lua): a per-run write quota (fs_quota,
-- --fs-quota, default 64 MiB) and a cap on how much the workspace may grow (workspace_max,
-- --workspace-max, default 1 GiB). Past either, the call is tool.denied with a message
-- that names the budget and what is left. One test per way of filling a disk.
local tidepool = require("tidepool")

local KiB = 1024

-- A fresh, empty workspace directory per test: growth accounts are per directory.
local dirs = {}
local function new_workspace()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -p '" .. path .. "'"))
  dirs[#dirs + 1] = path
  return path
end

teardown(function()
  for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
end)

local function run(src, ws, opts)
  opts = opts or {}
  opts.builtin_tools = true
  opts.workspace = ws
  return tidepool.run(src, opts)
end

local function result(src, ws, opts)
  local env = run(src, ws, opts)
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message))
  return env.result
end

-- A script that calls fs.write(path, ("x"):rep(size)) n times and returns each outcome.
local function writes(n, size, name)
  return ([[
    local out = {}
    for i = 1, %d do
      local ok, err = pcall(tools.fs.write, { path = %q .. i, content = ("x"):rep(%d) })
      out[i] = ok and "ok" or err.code .. ": " .. err.message
    end
    return out]]):format(n, name or "f", size)
end

describe("the run's write quota", function()
  it("a run writing past fs_quota is tool.denied, saying which quota and what is left", function()
    local ws = new_workspace()
    local r = result(writes(4, 300 * KiB), ws, { fs_quota = 1024 * KiB })
    assert.same({ "ok", "ok", "ok", "tool.denied: tools.fs.write was denied: writing f4 needs "
      .. "300 KiB but the run's write quota of 1 MiB has 124 KiB left; write less in one "
      .. "run: fewer or smaller files" }, r)
  end)

  it("rewriting one file over and over counts every write, not the file's size", function()
    local ws = new_workspace()
    local r = result(writes(5, 100 * KiB, "same"):gsub('%%q %.%. i', '"same"'), ws,
      { fs_quota = 450 * KiB })
    assert.same({ "ok", "ok", "ok", "ok" }, { r[1], r[2], r[3], r[4] })
    assert.matches("^tool.denied: .* the run's write quota of 450 KiB has 50 KiB left", r[5])
  end)

  it("many empty files each count 4 KiB: a flood of inodes is bounded too", function()
    local ws = new_workspace()
    local r = result(writes(20, 0), ws, { fs_quota = 40 * KiB })
    for i = 1, 10 do assert.equal("ok", r[i]) end
    assert.equal("tool.denied: tools.fs.write was denied: writing f11 needs 4 KiB but the run's "
      .. "write quota of 40 KiB has 0 bytes left; write less in one run: fewer or smaller files",
      r[11])
  end)

  it("mkdir with parents counts 4 KiB per directory it makes, and stops at the quota", function()
    local ws = new_workspace()
    local r = result([[
      local ok, err = pcall(tools.fs.mkdir, { path = "a/b/c/d/e/f", parents = true })
      local ok2, err2 = pcall(tools.fs.mkdir, { path = "a/b", parents = true })  -- exists: free
      return { ok or (err.code .. ": " .. err.message), ok2 }]], ws, { fs_quota = 12 * KiB })
    assert.same({ "tool.denied: tools.fs.mkdir was denied: making the directory a/b/c/d/e/f "
      .. "needs 4 KiB but the run's write quota of 12 KiB has 0 bytes left; write less in "
      .. "one run: fewer or smaller files", true }, r)
    assert.equal(0, os.execute("test -d '" .. ws .. "/a/b/c'") and 0)
    assert.is_nil((os.execute("test -d '" .. ws .. "/a/b/c/d'")))
  end)

  it("the quota is per run: the next run may write again", function()
    local ws = new_workspace()
    local opts = { fs_quota = 100 * KiB }
    assert.equal("ok", result(writes(1, 90 * KiB, "a"), ws, opts)[1])
    assert.equal("ok", result(writes(1, 90 * KiB, "b"), ws, { fs_quota = 100 * KiB })[1])
  end)

  it("is 64 MiB by default", function()
    local ws = new_workspace()
    local r = result(writes(22, 3 * 1024 * KiB), ws)
    for i = 1, 21 do assert.equal("ok", r[i]) end
    assert.matches("the run's write quota of 64 MiB has 1 MiB left", r[22], 1, true)
  end)

  it("fs_quota = 0 means no quota", function()
    local ws = new_workspace()
    local r = result(writes(3, 100 * KiB), ws, { fs_quota = 0 })
    assert.same({ "ok", "ok", "ok" }, r)
  end)
end)

describe("the workspace's growth cap", function()
  it("holds across runs and says how much of it is left", function()
    local ws = new_workspace()
    local opts = function() return { workspace_max = 256 * KiB } end
    assert.same({ "ok", "ok" }, result(writes(2, 100 * KiB, "a"), ws, opts()))
    local r = result(writes(1, 100 * KiB, "b"), ws, opts())
    assert.equal("tool.denied: tools.fs.write was denied: writing b1 needs 100 KiB but the "
      .. "workspace's growth cap is 256 KiB over the 0 bytes it held at start, and 56 KiB "
      .. "of it is left; remove files you no longer need (fs.remove) or write less", r[1])
  end)

  it("removing a file gives its room back", function()
    local ws = new_workspace()
    local opts = function() return { workspace_max = 128 * KiB } end
    assert.same({ "ok" }, result(writes(1, 100 * KiB, "a"), ws, opts()))
    assert.matches("^tool.denied", result(writes(1, 100 * KiB, "b"), ws, opts())[1])
    result("tools.fs.remove{ path = 'a1' } return true", ws, opts())
    assert.same({ "ok" }, result(writes(1, 100 * KiB, "b"), ws, opts()))
  end)

  it("overwriting a file counts only the difference", function()
    local ws = new_workspace()
    local opts = function() return { workspace_max = 128 * KiB } end
    for _ = 1, 5 do
      assert.same({ "ok" }, result(writes(1, 100 * KiB, "same"), ws, opts()))
    end
  end)

  it("new directories count 4 KiB each", function()
    local ws = new_workspace()
    local r = result([[
      local out = {}
      for i = 1, 5 do
        local ok, err = pcall(tools.fs.mkdir, { path = "d" .. i })
        out[i] = ok and "ok" or err.code
      end
      return out]], ws, { workspace_max = 12 * KiB })
    assert.same({ "ok", "ok", "ok", "tool.denied", "tool.denied" }, r)
  end)

  it("counts what the workspace held at start in its message", function()
    local ws = new_workspace()
    local f = assert(io.open(ws .. "/old.txt", "wb"))
    f:write(("o"):rep(10000))
    f:close()
    local r = result(writes(1, 100 * KiB), ws, { workspace_max = 8 * KiB })
    assert.matches("over the 12 KiB it held at start, and 8 KiB of it is left", r[1], 1, true)
  end)
end)

describe("the options", function()
  local BIN = require("spec.helper").BIN
  it("tidepool run takes --fs-quota and --workspace-max", function()
    local ws = new_workspace()
    local p = io.popen("echo 'return tools.fs.write{path = \"a\", content = (\"x\"):rep(5000)}' | "
      .. BIN .. " run --json --workspace " .. ws .. " --fs-quota 4K --workspace-max 1G -")
    local out = p:read("a")
    p:close()
    assert.matches('"code":"tool.denied"', out, 1, true)
    assert.matches("the run's write quota of 4 KiB has 4 KiB left", out, 1, true)
  end)

  it("a bad --fs-quota or --workspace-max is a usage error", function()
    for _, opt in ipairs{ "--fs-quota 12Q", "--workspace-max -1" } do
      local ok, _, code = os.execute(BIN .. " run " .. opt .. " - </dev/null 2>/dev/null")
      assert.is_nil(ok)
      assert.equal(2, code)
    end
  end)

  it("the Lua module refuses a bad fs_quota", function()
    assert.has_error(function() tidepool.run("return 1", { fs_quota = -1 }) end,
      "tidepool: option 'fs_quota' must be a non-negative integer")
  end)
end)
