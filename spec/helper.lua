-- spec/helper.lua: what the specs share. busted loads it before any spec (.busted's
-- helper, so `make test`, `make spec S=x` and a plain `busted` from the repository's root
-- all get it), and a spec takes it with
--   local H = require("spec.helper")
-- which works without busted's --helper too (from the root, LUA_PATH holding ./?.lua).
--
--   H.BUILD, H.BIN          the build directory ($BUILD, default build) and its tidepool
--   H.ROOT, H.ABS_BUILD, H.ABS_BIN   the same as absolute paths (H.ROOT: the current directory)
--   H.shell_quote(s)        s quoted for sh ('...'); H.q is the same
--   H.read(path)            the file's bytes (asserts it can)
--   H.write(path, text)     writes the file (asserts it can)
--   H.write_temp(text)      a new temporary file holding text: its path
--   H.temp_dir()            a new empty temporary directory: its path
--   H.cleanup()             removes every file and directory write_temp and temp_dir made
--   H.sh(cmd, stdin)        runs cmd under sh, stdin from the text stdin (or /dev/null):
--                           stdout, stderr, exit status
--   H.cli(args, stdin)      H.sh of "BIN args": tidepool's stdout, stderr, exit status
--   H.run_script(script, args, stdin)  `tidepool run ARGS FILE`, FILE holding script
local H = {}

H.BUILD = os.getenv("BUILD") or "build"
H.BIN = H.BUILD .. "/tidepool"

-- The modules the specs load: the repository's Lua files (lua.describe, spec.helper) and
-- this build's Lua module (tidepool.so), whether or not LUA_PATH and LUA_CPATH say so.
local function prepend(list, entry)
  if not (";" .. list .. ";"):find(";" .. entry .. ";", 1, true) then
    return entry .. ";" .. list
  end
  return list
end
package.path = prepend(prepend(package.path, "./?/init.lua"), "./?.lua")
package.cpath = prepend(package.cpath, H.BUILD .. "/lua/?.so")

function H.shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
H.q = H.shell_quote

function H.read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end

function H.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local made = {}  -- paths of write_temp and temp_dir, for cleanup

function H.write_temp(text)
  local path = os.tmpname()
  H.write(path, text)
  made[#made + 1] = path
  return path
end

function H.temp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -p " .. H.shell_quote(path)))
  made[#made + 1] = path
  return path
end

function H.cleanup()
  for _, p in ipairs(made) do os.execute("rm -rf " .. H.shell_quote(p)) end
  made = {}
end

-- The command is read by sh as a whole (a pipeline or a list of commands: its stdin and
-- stderr redirections cover every part), and may end with a comment or an `&`.
function H.sh(cmd, stdin)
  local errpath, inpath = os.tmpname(), nil
  local line = "(\n" .. cmd .. "\n) 2>" .. errpath
  if stdin then
    inpath = os.tmpname()
    H.write(inpath, stdin)
    line = line .. " <" .. inpath
  else
    line = line .. " </dev/null"
  end
  local p = assert(io.popen(line .. "\necho \"#rc=$?\"", "r"))
  local out = p:read("a")
  p:close()
  local err = H.read(errpath)
  os.remove(errpath)
  if inpath then os.remove(inpath) end
  local rc = tonumber(out:match("#rc=(%d+)\n$"))
  return (out:gsub("#rc=%d+\n$", "")), err, rc
end

function H.cli(args, stdin)
  return H.sh(H.BIN .. " " .. args, stdin)
end

function H.run_script(script, args, stdin)
  local path = os.tmpname()
  H.write(path, script)
  local out, err, rc = H.cli("run " .. (args or "") .. " " .. H.shell_quote(path), stdin)
  os.remove(path)
  return out, err, rc
end

H.ROOT = os.getenv("PWD") or ""
do  -- the current directory, as sh says (PWD may be stale)
  local p = io.popen("pwd")
  if p then H.ROOT = p:read("l") or H.ROOT; p:close() end
end
H.ABS_BUILD = H.BUILD:sub(1, 1) == "/" and H.BUILD or H.ROOT .. "/" .. H.BUILD
H.ABS_BIN = H.ABS_BUILD .. "/tidepool"

package.loaded["spec.helper"] = H
return H
