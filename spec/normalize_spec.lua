-- What models send: fenced scripts, prose around them, lone expressions, #! lines; and
-- errors that point at the line of the code the model wrote.
local tidepool = require "tidepool"

local function result(src)
  local env = tidepool.run(src)
  assert(env.ok, env.error and (env.error.code .. ": " .. env.error.message))
  return env.result
end

describe("fenced scripts", function()
  it("a ```lua fence with a sentence before and after runs the code inside", function()
    assert.are.equal(2, result("Here is the script:\n```lua\nlocal x = 1\nreturn x + 1\n```\n"
      .. "This returns 2."))
  end)

  it("a plain ``` fence runs the code inside", function()
    assert.are.equal(3, result("```\nreturn 3\n```"))
  end)

  it("a ~~~ fence runs the code inside", function()
    assert.are.equal(4, result("~~~lua\nreturn 4\n~~~\n"))
  end)

  it("an indented fence runs the code inside", function()
    assert.are.equal(5, result("Try this:\n  ```lua\nreturn 5\n  ```\n"))
  end)

  it("an unclosed fence runs everything after it", function()
    assert.are.equal(6, result("```lua\nlocal a = 6\nreturn a"))
  end)

  it("only the first fence runs", function()
    assert.are.equal(7, result("```lua\nreturn 7\n```\nor\n```lua\nreturn 8\n```"))
  end)

  it("a ``` line inside a ~~~ fence is part of the code", function()
    assert.are.equal("x\n```\ny", result("~~~\nreturn [[x\n```\ny]]\n~~~"))
  end)

  it("a runtime error's line counts from the fence's first line of code", function()
    local env = tidepool.run("Sure:\n```lua\nlocal a = 1\nlocal b = nil\nreturn a + b\n```\n"
      .. "Done.")
    assert.is_false(env.ok)
    assert.are.equal("runtime", env.error.code)
    assert.are.equal(3, env.error.line)
    assert.are.equal("return a + b", env.error.source)
    assert.are.equal("attempt to perform arithmetic on a nil value (local 'b')",
      env.error.message)
  end)

  it("a syntax error's line counts from the fence's first line of code", function()
    local env = tidepool.run("Here:\n\n```lua\nlocal a = 1\nlocal b = = 2\n```")
    assert.is_false(env.ok)
    assert.are.equal("syntax", env.error.code)
    assert.are.equal(2, env.error.line)
    assert.are.equal("local b = = 2", env.error.source)
    assert.are.equal("unexpected symbol near '='", env.error.message)
  end)
end)

describe("lone expressions", function()
  it("an arithmetic expression returns its value", function()
    assert.are.equal(3, result("1 + 2"))
  end)

  it("a table constructor returns the table", function()
    assert.are.same({ a = 1 }, result("{ a = 1 }"))
  end)

  it("a string returns the string", function()
    assert.are.equal("str", result('"str"'))
  end)

  it("a call expression returns its value", function()
    assert.are.equal("ABC", result('("abc"):upper()'))
  end)

  it("a fenced lone expression returns its value", function()
    assert.are.equal(42, result("```lua\n6 * 7\n```"))
  end)

  it("a statement is not turned into a return", function()
    local env = tidepool.run("x = 1")
    assert.is_true(env.ok)
    assert.are.equal(tidepool.null, env.result)
  end)
end)

describe("#! lines", function()
  it("a #! first line is dropped and line numbers still count it", function()
    local env = tidepool.run("#!/usr/bin/env tidepool\nlocal x = nil\nreturn x.y")
    assert.is_false(env.ok)
    assert.are.equal(3, env.error.line)
    assert.are.equal("return x.y", env.error.source)
  end)

  it("a script with a #! line runs", function()
    assert.are.equal(1, result("#!/usr/bin/env tidepool\nreturn 1"))
  end)
end)

describe("the envelope's error", function()
  it("a runtime error has code, message, line, source and a hint", function()
    local env = tidepool.run("local t = {}\nreturn t.a.b")
    assert.are.same({
      code = "runtime",
      message = "attempt to index a nil value (field 'a')",
      line = 2,
      source = "return t.a.b",
      hint = env.error.hint,
    }, env.error)
    assert.is_string(env.error.hint)
  end)

  it("an error() call reports its own line and message without the position", function()
    local env = tidepool.run('local x = 1\n\nerror("boom")')
    assert.are.equal("boom", env.error.message)
    assert.are.equal(3, env.error.line)
    assert.are.equal('error("boom")', env.error.source)
  end)

  it("an error raised in a function reports the line of the raise", function()
    local env = tidepool.run("local function f()\n  error('deep')\nend\nf()")
    assert.are.equal("deep", env.error.message)
    assert.are.equal(2, env.error.line)
    assert.are.equal("error('deep')", env.error.source)
  end)

  it("a syntax error has code, message, line, source and a hint", function()
    local env = tidepool.run("return 1 +")
    assert.are.equal("syntax", env.error.code)
    assert.are.equal("unexpected symbol near <eof>", env.error.message)
    assert.are.equal(1, env.error.line)
    assert.are.equal("return 1 +", env.error.source)
    assert.is_string(env.error.hint)
  end)

  it("a limit error has a line, source and hint", function()
    local env = tidepool.run("local n = 0\nwhile true do n = n + 1 end", { instructions = 1000 })
    assert.are.equal("limit.instructions", env.error.code)
    assert.are.equal(2, env.error.line)
    assert.are.equal("while true do n = n + 1 end", env.error.source)
    assert.is_string(env.error.hint)
  end)

  it("an error table's message field is the message", function()
    local env = tidepool.run("error({ message = 'custom', code = 7 })")
    assert.are.equal("runtime", env.error.code)
    assert.are.equal("custom", env.error.message)
  end)

  it("a successful run's envelope has ok, result, logs, calls and stats", function()
    local env = tidepool.run("print('hi') return { n = 1 }")
    assert.is_true(env.ok)
    assert.are.same({ n = 1 }, env.result)
    assert.are.same({ "hi" }, env.logs)
    assert.are.same({}, env.calls)
    assert.is_number(env.stats.wall_ms)
    assert.is_number(env.stats.cpu_ms)
    assert.is_number(env.stats.memory_peak)
    assert.is_nil(env.error)
  end)
end)

describe("fences inside a valid script (what a reviewer approves is what runs)", function()
  it("a script whose long string holds a ```lua fence runs as written", function()
    local src = 'local doc = [[\n```lua\nreturn "smuggled"\n```\n]]\nreturn #doc'
    assert.are.equal(#'```lua\nreturn "smuggled"\n```\n', result(src))
  end)

  it("a script that prints a fenced snippet runs whole, not just the snippet", function()
    local env = tidepool.run('print("```")\nprint("inside")\nprint("```")\nreturn "whole"')
    assert.is_true(env.ok)
    assert.are.equal("whole", env.result)
    assert.are.same({ "```", "inside", "```" }, env.logs)
  end)

  it("a ~~~ fence in a comment does not cut the script", function()
    assert.are.equal(3, result("local a = 1\n--[[\n~~~\nreturn 99\n~~~\n]]\nreturn a + 2"))
  end)

  it("a fence in a string of a script with a syntax error reports the script's error", function()
    local env = tidepool.run('local s = [[\n```\nreturn 1\n```\n]]\nlocal x = = 2\nreturn s')
    assert.is_false(env.ok)
    assert.are.equal("syntax", env.error.code)
    assert.are.equal(6, env.error.line)
    assert.are.equal("local x = = 2", env.error.source)
    assert.are.equal("unexpected symbol near '='", env.error.message)
  end)

  it("prose around a fence whose code is broken reports the code's error", function()
    local env = tidepool.run("Here you go:\n```lua\nlocal ok = true\nif ok then\n```\nBye.")
    assert.is_false(env.ok)
    assert.are.equal("syntax", env.error.code)
    assert.are.equal(3, env.error.line)
    assert.are.equal("'end' expected (to close 'if' at line 2) near <eof>", env.error.message)
  end)

  it("a fenced payload after a deliberate syntax error is not run in the script's place", function()
    local env = tidepool.run('local s = [[\n```\nreturn "payload"\n```\n]] = 1\nreturn s')
    assert.is_false(env.ok)
    assert.are.equal("syntax", env.error.code)
    assert.are.equal(5, env.error.line)
  end)

  it("tidepool.check accepts a valid script holding a fence as written", function()
    local env = tidepool.check('local s = "```"\nreturn s')
    assert.is_true(env.ok)
  end)
end)
