-- describe.lua: writes what tidepool shows the model for a fixture of tools, and counts
-- tokens (bench/describe/tokens.lua) of that text and of another (Cloudflare codemode's).
--   lua bench/describe/describe.lua write FIXTURE OUTDIR   -> OUTDIR/full.txt, compact.txt
--   lua bench/describe/describe.lua count FILE...          -> "tokens bytes" per file
--   lua bench/describe/describe.lua servers                -> "chars mode" of run_lua's
--                                         description (auto) for four common servers' 56 tools
local D = require("lua.describe")
local F = require("bench.describe.fixture")
local T = require("bench.describe.tokens")
local H = require("spec.helper")  -- read, write
local read, write = H.read, H.write

local cmd = arg[1]
if cmd == "write" then
  local tools = F.load(arg[2])
  write(arg[3] .. "/full.txt", D.describe(tools, "full"))
  write(arg[3] .. "/compact.txt", D.describe(tools, "compact"))
elseif cmd == "count" then
  for i = 2, #arg do
    local s = read(arg[i])
    print(T.count(s), #s)
  end
elseif cmd == "servers" then
  local text, mode = D.describe(require("bench.describe.servers").four_servers(), "auto")
  print(D.text_len(text), mode)
else
  io.stderr:write("usage: describe.lua write FIXTURE OUTDIR | count FILE... | servers\n")
  os.exit(2)
end
