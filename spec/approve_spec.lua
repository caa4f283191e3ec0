-- Approvals in `tidepool run` (engine/front/cli.c): a call that a policy rule asks a
-- person to approve is asked about on the terminal (/dev/tty), denied when there is no
-- terminal (setsid -w detaches the controlling one), and decided without asking by
-- --approve all|none. The terminal is a pseudo-terminal made by util-linux's script(1),
-- fed the answer. (The C API is in spec/c/test_approvals.c.) Fixture tools:
-- spec/fixtures/tools_calls (fx.echo returns its arguments).
local dkjson = require "dkjson"

local H = require("spec.helper")
local BIN, shell_quote, write_temp = H.BIN, H.shell_quote, H.write_temp
local TOOLS = "spec/fixtures/tools_calls"

local CONFIG = dkjson.encode({ policy = { default = "allow", rules = {
  { tools = "fx.echo", effect = "ask", where = "amount > 100",
    reason = "big payments need a person" },
} } })

-- The script's calls: a small one (allowed without asking) and a big one (asked).
local SCRIPT = [[
  local small = tools.fx.echo{amount = 5}
  local ok, r = pcall(tools.fx.echo, {amount = 250, to = "bob"})
  return {small = small.amount, big = ok and r or r.message}
]]

-- Runs SCRIPT through `tidepool run --json` inside shell words `wrap` (a %s for the
-- command) with more options; returns the envelope (or nil), the whole output and the
-- exit status.
local function run(wrap, options, stdin_text)
  local cpath, spath = write_temp(CONFIG), write_temp(SCRIPT)
  local cmd = BIN .. " run --json --no-builtin-tools --tools " .. TOOLS .. " --config "
    .. shell_quote(cpath) .. " " .. (options or "") .. " " .. shell_quote(spath)
  local full = wrap:format(shell_quote(cmd))
  if stdin_text then full = "printf " .. shell_quote(stdin_text) .. " | " .. full end
  local p = assert(io.popen(full .. " 2>&1; echo \"#rc=$?\""))
  local out = p:read("a")
  p:close()
  os.remove(cpath)
  os.remove(spath)
  local rc = tonumber(out:match("#rc=(%d+)\n$"))
  out = out:gsub("#rc=%d+\n$", "")
  local line = out:match("(%{\"ok\".-)\r?\n") or out:match("(%{\"ok\".*)$")
  return line and dkjson.decode(line), out, rc
end

local NO_TTY = "setsid -w sh -c %s"
local PTY = "script -qec %s /dev/null"

describe("tidepool run --approve", function()
  it("all: runs the asked call with its arguments, without asking", function()
    local env, out, rc = run(NO_TTY, "--approve all")
    assert.equal(0, rc, out)
    assert.same({ small = 5, big = { amount = 250, to = "bob" } }, env.result)
    assert.equal(2, #env.calls)
    assert.is_nil(out:find("allow this call", 1, true))
  end)

  it("none: denies it with tool.denied, the rule's reason and why", function()
    local env, out, rc = run(NO_TTY, "--approve none")
    assert.equal(0, rc, out)
    assert.same({ small = 5, big = "tools.fx.echo was denied by the host's policy: big "
      .. "payments need a person (policy rule 0); this run declines every call that needs a "
      .. "person's approval (--approve none)" }, env.result)
    assert.equal("tool.denied", env.calls[2].error)
  end)

  it("with no terminal to ask on, denies it", function()
    local env, out, rc = run(NO_TTY)
    assert.equal(0, rc, out)
    assert.same({ small = 5, big = "tools.fx.echo was denied by the host's policy: big "
      .. "payments need a person (policy rule 0); there is no terminal to ask a person on, so "
      .. "it is denied" }, env.result)
  end)

  it("rejects another value as a usage error", function()
    local _, out, rc = run(NO_TTY, "--approve maybe")
    assert.equal(2, rc)
    assert.truthy(out:find("--approve 'maybe': use ask, all or none", 1, true), out)
  end)
end)

describe("tidepool run on a terminal", function()
  it("asks once, showing the tool, the arguments and the reason; y runs the call", function()
    local env, out, rc = run(PTY, nil, "y\n")
    assert.equal(0, rc, out)
    assert.truthy(out:find("tidepool: the script calls tools.fx.echo\r?\n  arguments: "
      .. "{\"amount\":250,\"to\":\"bob\"}\r?\n  reason: big payments need a person %(policy "
      .. "rule 0%)\r?\n  %(the run's time limit, %-%-timeout, keeps counting while you "
      .. "decide%)\r?\nallow this call%? %[y/N%] "), out)
    local _, asked = out:gsub("allow this call", "")
    assert.equal(1, asked)
    assert.same({ small = 5, big = { amount = 250, to = "bob" } }, env.result)
  end)

  it("n denies it", function()
    local env, out, rc = run(PTY, nil, "n\n")
    assert.equal(0, rc, out)
    assert.same({ small = 5, big = "tools.fx.echo was denied by the host's policy: big "
      .. "payments need a person (policy rule 0); the person asked at the terminal declined "
      .. "it" }, env.result)
  end)

  it("an empty answer is no", function()
    local env, out = run(PTY, nil, "\n")
    assert.truthy(tostring(env.result.big):find("declined it", 1, true), out)
  end)

  it("asks on the terminal when the script comes from standard input", function()
    local cpath = write_temp(CONFIG)
    local spath = write_temp(SCRIPT)
    local cmd = "cat " .. shell_quote(spath) .. " | " .. BIN .. " run --json "
      .. "--no-builtin-tools --tools " .. TOOLS .. " --config " .. shell_quote(cpath) .. " -"
    local p = assert(io.popen("printf 'yes\\n' | script -qec " .. shell_quote(cmd)
      .. " /dev/null 2>&1"))
    local out = p:read("a")
    p:close()
    os.remove(cpath)
    os.remove(spath)
    assert.truthy(out:find("allow this call? [y/N] ", 1, true), out)
    local env = dkjson.decode(out:match("(%{\"ok\".-)\r?\n"))
    assert.same({ amount = 250, to = "bob" }, env.result.big)
  end)

  it("cuts long arguments at the prompt", function()
    local long = string.rep("x", 1000)
    local cpath = write_temp(CONFIG)
    local spath = write_temp("return tools.fx.echo{amount = 101, note = '" .. long .. "'}.amount")
    local cmd = BIN .. " run --json --no-builtin-tools --tools " .. TOOLS .. " --config "
      .. shell_quote(cpath) .. " " .. shell_quote(spath)
    local p = assert(io.popen("printf 'y\\n' | script -qec " .. shell_quote(cmd)
      .. " /dev/null 2>&1"))
    local out = p:read("a")
    p:close()
    os.remove(cpath)
    os.remove(spath)
    local shown = out:match("  arguments: ([^\r\n]*)")
    assert.equal("{\"amount\":101,\"note\":\"" .. string.rep("x", 400 - 22) .. "... (1024 "
      .. "bytes in all)", shown)
    assert.truthy(out:find("\"result\":101", 1, true), out)
  end)
end)
