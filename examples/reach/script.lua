-- examples/reach/script.lua: what a model writes when its one tool, run_lua, reaches an
-- issue tracker's HTTP API, git, a filesystem server and a memory server: one script,
-- one round trip, instead of a dozen tool calls.
--   sh examples/reach/run.sh     (starts the API, makes the work/ repository, runs this)
local API = "http://127.0.0.1:18787"

-- the open issues, from the HTTP API
local open = json.decode(tools.http.fetch{url = API .. "/issues?state=open"}.body)

-- what changed lately, from git (confined to the workspace)
local log = tools.proc.run{cmd = "git", args = {"log", "--format=%s", "-5"}}
assert(log.exit_code == 0, log.stderr)

-- the team's notes, through the filesystem server
local notes = tools.files.read_text_file{path = "NOTES.md"}

-- an issue is addressed when a recent commit names it (#N)
local report, addressed = {}, 0
for _, issue in ipairs(open) do
  local fixed_by
  for subject in log.stdout:gmatch("[^\n]+") do
    if subject:find("#" .. issue.number, 1, true) then fixed_by = subject end
  end
  report[#report + 1] = {number = issue.number, title = issue.title, fixed_by = fixed_by}
  if fixed_by then
    addressed = addressed + 1
    tools.http.fetch{method = "POST", url = API .. "/issues/" .. issue.number .. "/comments",
                     headers = {["Content-Type"] = "application/json"},
                     body = json.encode{body = "Addressed by: " .. fixed_by}}
  end
end

-- remember it for the next session, in the memory server's knowledge graph
tools.memory.create_entities{entities = {{
  name = "triage", entityType = "report",
  observations = {("%d open issues, %d addressed"):format(#open, addressed)},
}}}

return {issues = report, owner = notes.content:match("Owner: ([^\n]+)")}
