-- count.bump{tag}: a side effect outside the state store, so that a test can count how
-- many times an approved call was really made while Redis fails: appends "<tag>\n" to
-- the file $TP_COUNT_FILE and returns how many lines of that tag it holds now.
-- spec/mcp/cluster_faults.mjs approves it through a policy rule and checks every tag
-- was written exactly once.
return {
  name = "count.bump",
  description = "Appends tag to $TP_COUNT_FILE; returns how many times tag is there.",
  input = {
    type = "object",
    properties = { tag = { type = "string", minLength = 1 } },
    required = { "tag" },
  },
  handler = function(args)
    local path = os.getenv("TP_COUNT_FILE")
    local f = assert(io.open(path, "a"))
    f:write(args.tag, "\n")
    f:close()
    local n = 0
    for line in io.lines(path) do if line == args.tag then n = n + 1 end end
    return { n = n }
  end,
}
