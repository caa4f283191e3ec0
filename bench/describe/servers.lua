-- servers.lua: tool sets for the description's size (spec/describe_fit_spec.lua and
-- bench/describe/run.sh): the tools of four common MCP servers, and many made-up ones.
local M = {}

-- A tool of a namespace with required fields (strings) and optional ones.
function M.tool(ns, name, required, optional, desc)
  local props, req = {}, {}
  for _, f in ipairs(required or {}) do props[f] = { type = "string" }; req[#req + 1] = f end
  for _, f in ipairs(optional or {}) do props[f] = { type = "string" } end
  return { name = ns .. "." .. name, description = desc or ("The " .. name .. " tool."),
           input = { type = "object", properties = props, required = req } }
end

-- Four common MCP servers, 56 tools: GitHub (26), filesystem (13), memory (9), Slack (8),
-- with the names and required fields their reference servers have.
function M.four_servers()
  local t = {}
  local function add(ns, list)
    for _, x in ipairs(list) do t[#t + 1] = M.tool(ns, x[1], x[2], x[3]) end
  end
  add("github", {
    { "create_or_update_file", { "owner", "repo", "path", "content", "message", "branch" },
      { "sha" } },
    { "search_repositories", { "query" }, { "page", "perPage" } },
    { "create_repository", { "name" }, { "description", "private", "autoInit" } },
    { "get_file_contents", { "owner", "repo", "path" }, { "branch" } },
    { "push_files", { "owner", "repo", "branch", "files", "message" } },
    { "create_issue", { "owner", "repo", "title" },
      { "body", "assignees", "labels", "milestone" } },
    { "create_pull_request", { "owner", "repo", "title", "head", "base" }, { "body", "draft" } },
    { "fork_repository", { "owner", "repo" }, { "organization" } },
    { "create_branch", { "owner", "repo", "branch" }, { "from_branch" } },
    { "list_commits", { "owner", "repo" }, { "sha", "page", "perPage" } },
    { "list_issues", { "owner", "repo" }, { "state", "labels", "sort", "direction", "since" } },
    { "update_issue", { "owner", "repo", "issue_number" }, { "title", "body", "state" } },
    { "add_issue_comment", { "owner", "repo", "issue_number", "body" } },
    { "search_code", { "q" }, { "sort", "order", "per_page", "page" } },
    { "search_issues", { "q" }, { "sort", "order", "per_page", "page" } },
    { "search_users", { "q" }, { "sort", "order", "per_page", "page" } },
    { "get_issue", { "owner", "repo", "issue_number" } },
    { "get_pull_request", { "owner", "repo", "pull_number" } },
    { "list_pull_requests", { "owner", "repo" }, { "state", "head", "base", "sort" } },
    { "create_pull_request_review", { "owner", "repo", "pull_number", "body", "event" },
      { "comments" } },
    { "merge_pull_request", { "owner", "repo", "pull_number" },
      { "commit_title", "merge_method" } },
    { "get_pull_request_files", { "owner", "repo", "pull_number" } },
    { "get_pull_request_status", { "owner", "repo", "pull_number" } },
    { "update_pull_request_branch", { "owner", "repo", "pull_number" }, { "expected_head_sha" } },
    { "get_pull_request_comments", { "owner", "repo", "pull_number" } },
    { "get_pull_request_reviews", { "owner", "repo", "pull_number" } },
  })
  add("filesystem", {
    { "read_file", { "path" }, { "head", "tail" } },
    { "read_text_file", { "path" }, { "head", "tail" } },
    { "read_media_file", { "path" } }, { "read_multiple_files", { "paths" } },
    { "write_file", { "path", "content" } }, { "edit_file", { "path", "edits" }, { "dryRun" } },
    { "create_directory", { "path" } }, { "list_directory", { "path" } },
    { "directory_tree", { "path" } }, { "move_file", { "source", "destination" } },
    { "search_files", { "path", "pattern" }, { "excludePatterns" } },
    { "get_file_info", { "path" } }, { "list_allowed_directories", {} },
  })
  add("memory", {
    { "create_entities", { "entities" } }, { "create_relations", { "relations" } },
    { "add_observations", { "observations" } }, { "delete_entities", { "entityNames" } },
    { "delete_observations", { "deletions" } }, { "delete_relations", { "relations" } },
    { "read_graph", {} }, { "search_nodes", { "query" } }, { "open_nodes", { "names" } },
  })
  add("slack", {
    { "list_channels", {}, { "limit", "cursor" } }, { "post_message", { "channel_id", "text" } },
    { "reply_to_thread", { "channel_id", "thread_ts", "text" } },
    { "add_reaction", { "channel_id", "timestamp", "reaction" } },
    { "get_channel_history", { "channel_id" }, { "limit" } },
    { "get_thread_replies", { "channel_id", "thread_ts" } },
    { "get_users", {}, { "cursor", "limit" } }, { "get_user_profile", { "user_id" } },
  })
  assert(#t == 56)
  return t
end

-- n tools in namespaces of 20.
function M.many(n)
  local t = {}
  for i = 1, n do
    t[i] = M.tool(("service%02d"):format((i - 1) // 20 + 1), ("operation_%03d"):format(i),
                  { "id" }, { "x" })
  end
  return t
end

return M
