-- The shape of an upstream tool's last result (a tool with no outputSchema), kept in the
-- state store: with --state DIR, a second `tidepool run` process shows it in
-- tools.describe before the tool has answered there (engine/host/host.c, E.seen and
-- E.seen_load). The MCP server is spec/upstream/edge-server.mjs (node).
local H = require("spec.helper")
local BIN, shell_quote, write = H.BIN, H.shell_quote, H.write

local function sh(cmd)  -- stdout and the exit status
  local out, _, rc = H.sh(cmd)
  return out, rc
end

describe("the shape last seen, with --state", function()
  local dir, config
  before_each(function()
    dir = sh("mktemp -d /tmp/tp-seen-XXXXXX"):gsub("\n$", "")
    config = dir .. "/config.json"
    local server = sh("pwd"):gsub("\n$", "") .. "/spec/upstream/edge-server.mjs"
    write(config, '{"mcpServers": {"edge": {"command": "node", "args": ["' .. server .. '"]}}}')
  end)
  after_each(function() sh("rm -rf " .. shell_quote(dir)) end)

  -- tidepool run --config with the script; state: the --state DIR, or nil.
  local function run(script, state)
    write(dir .. "/script.lua", script)
    local out, rc = sh(BIN .. " run --config " .. shell_quote(config)
      .. (state and (" --state " .. shell_quote(state)) or "") .. " "
      .. shell_quote(dir .. "/script.lua"))
    assert.are.equal(0, rc, out)
    return out
  end

  local DESCRIBE = 'return tools.describe("edge.json_text") .. tools.describe("edge.echo")'
  local JSON_SHAPE = "-- its last result here was {a: integer, b: integer[], c: json.null}\n"
  local ECHO_SHAPE = "-- its last result here was string\n"

  it("a second process reads what the first one's call gave back", function()
    local state = dir .. "/state"
    local before = run(DESCRIBE, state)
    assert.is_nil(before:find("its last result", 1, true))
    run('tools.edge.json_text{} tools.edge.echo{text = "x"} return 1', state)
    local after = run(DESCRIBE, state)
    assert.truthy(after:find(JSON_SHAPE, 1, true), after)
    assert.truthy(after:find(ECHO_SHAPE, 1, true), after)
  end)

  it("without --state another process knows nothing of it", function()
    run('tools.edge.json_text{} return 1')
    local after = run(DESCRIBE)
    assert.is_nil(after:find("its last result", 1, true))
  end)

  it("a record past 600 bytes, or one with a NUL byte, is not shown", function()
    local state = dir .. "/state"
    run("return 1", state)  -- makes the database
    local db = shell_quote(state .. "/tidepool.db")
    local _, rc = sh("sqlite3 " .. db .. " \"INSERT INTO runs (id, rec, expires) VALUES "
      .. "('tool-shape:edge.json_text', '{' || printf('%.700c', 'x') || '}', 9999999999999), "
      .. "('tool-shape:edge.echo', CAST(X'737400' AS BLOB), 9999999999999)\"")
    assert.are.equal(0, rc, "the sqlite3 command failed (scripts/deps.sh installs it)")
    local after = run(DESCRIBE, state)
    assert.is_nil(after:find("its last result", 1, true), after)
  end)
end)
