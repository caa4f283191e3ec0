-- The shipped examples work with each other: every example script runs, and succeeds,
-- with the shipped configs it could meet. A script that uses only the built-in tools
-- (examples/report.lua) must pass under every shipped config (none, examples/policy.json,
-- examples/reach/config.json); a script written for its own config (examples/reach) runs
-- with that config, against the example's own API and the npm MCP servers it names.
-- A new .lua file under examples/ fails this spec until it is listed below as a script or
-- as something else, with the reason.
local dkjson = require "dkjson"

local H = require("spec.helper")
local BIN, q, sh, read, write = H.BIN, H.q, H.sh, H.read, H.write

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir " .. q(d)))
  return d
end

-- What each .lua file under examples/ is. "script": run by this spec.
local KINDS = {
  ["examples/report.lua"] = "script",
  ["examples/reach/script.lua"] = "script",
  ["examples/lighttpd/run.lua"] = "a lighttpd mod_magnet handler (spec/embed/lighttpd.mjs)",
  ["examples/plugin/tools/units.lua"] = "a plugin (its own spec: examples/plugin/units_spec.lua)",
  ["examples/plugin/units_spec.lua"] = "a plugin's busted spec (scripts/run-tests.sh runs it)",
}

-- The shipped configs; reach's needs its workspace ("work") beside it.
local CONFIGS = { "examples/policy.json", "examples/reach/config.json" }

describe("the shipped examples", function()
  it("every .lua file under examples/ is known to this spec", function()
    local out = sh("find examples -name '*.lua' | sort")
    for path in out:gmatch("[^\n]+") do
      assert(KINDS[path], path .. " is new: list it in spec/examples_spec.lua (a script this "
        .. "spec runs with the shipped configs, or what else it is)")
    end
  end)

  it("every shipped config passes tidepool config check", function()
    local dir = tmpdir()
    for _, c in ipairs(CONFIGS) do
      local copy = dir .. "/" .. c:gsub("/", "_")
      write(copy, read(c))
      assert(os.execute("mkdir -p " .. q(dir .. "/work")))
      local out, err, rc = sh(BIN .. " config check " .. q(copy))
      -- reach's servers are started by npx: a machine without npx warns (exit 3)
      assert(rc == 0 or (c:find("reach") and rc == 3 and err:find("npx")),
        c .. ": " .. out .. err)
    end
    os.execute("rm -rf " .. q(dir))
  end)

  it("examples/report.lua succeeds with no config and under every shipped config", function()
    local dir = tmpdir()
    assert(os.execute("mkdir " .. q(dir .. "/work")))
    local configs = { false }
    for _, c in ipairs(CONFIGS) do
      local copy = dir .. "/" .. c:gsub("/", "_")
      write(copy, read(c))
      configs[#configs + 1] = copy
    end
    for _, c in ipairs(configs) do
      local out, err, rc = sh(BIN .. " run --json " .. (c and "--config " .. q(c) or "")
        .. " examples/report.lua")
      local env = dkjson.decode(out)
      assert(rc == 0 and env and env.ok, tostring(c) .. ": " .. out .. err)
      assert.equal(545.75, env.result.revenue)
      assert.equal("cy", env.result.top_customer)
      assert.is_false(env.result.bad_key_accepted)
    end
    os.execute("rm -rf " .. q(dir))
  end)

  it("examples/reach/script.lua succeeds with its config, its API and its MCP servers",
    function()
      local mods = "spec/mcp/node_modules/@modelcontextprotocol"
      local have = sh("command -v node git >/dev/null && test -d " .. mods .. "/server-memory"
        .. " && echo yes")
      if not have:find("yes") then
        pending("needs node, git and spec/mcp/node_modules (npm install --prefix spec/mcp)")
        return
      end
      local dir = tmpdir()
      local work = dir .. "/work"
      assert(os.execute("mkdir " .. q(work)))
      local git = "git -C " .. q(work) .. " -c user.name=ex -c user.email=ex@example.com "
      assert(os.execute(git .. "init -q && printf '# Notes\\nOwner: Ada\\n' > "
        .. q(work .. "/NOTES.md") .. " && " .. git .. "add NOTES.md && " .. git
        .. "commit -qm 'Add the notes' && " .. git .. "commit -q --allow-empty -m "
        .. "'Fix the crash on an empty config file (#1)'"))
      -- the shipped config as it is, but for `npx -y PKG` made `node <the installed PKG>`
      -- (no download in a test)
      local cfg = dkjson.decode(read("examples/reach/config.json"))
      local abs = sh("pwd"):gsub("\n", "") .. "/" .. mods
      for _, srv in pairs(cfg.mcpServers) do
        assert.equal("npx", srv.command)
        local pkg = srv.args[2]:match("^@modelcontextprotocol/(.+)$")
        srv.command = "node"
        srv.args[2] = abs .. "/" .. pkg .. "/dist/index.js"
        table.remove(srv.args, 1)
        srv.env = { MEMORY_FILE_PATH = dir .. "/memory.json" }
      end
      cfg["$schema"] = nil
      write(dir .. "/config.json", dkjson.encode(cfg))
      local pidfile = dir .. "/api.pid"
      assert(os.execute("node examples/reach/api.mjs >/dev/null 2>&1 & echo $! > " .. q(pidfile)))
      local pid = read(pidfile):match("%d+")
      local ok, err = pcall(function()
        local up = sh("for i in $(seq 100); do curl -s -o /dev/null "
          .. "http://127.0.0.1:18787/issues && echo up && break; sleep 0.1; done")
        assert(up:find("up"), "examples/reach/api.mjs did not start")
        local out, stderr, rc = sh(BIN .. " run --json --config " .. q(dir .. "/config.json")
          .. " examples/reach/script.lua")
        local env = dkjson.decode(out)
        assert(rc == 0 and env and env.ok, out .. stderr)
        assert.equal("Ada", env.result.owner)
        assert.equal(2, #env.result.issues)
        assert.equal(1, env.result.issues[1].number)
        assert.equal("Fix the crash on an empty config file (#1)", env.result.issues[1].fixed_by)
      end)
      os.execute("kill " .. pid .. " 2>/dev/null")
      os.execute("rm -rf " .. q(dir))
      assert(ok, err)
    end)
end)
