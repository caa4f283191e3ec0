-- tools/fs.lua: fs.read, fs.write, fs.list, fs.stat, fs.remove, fs.mkdir, confined to the
-- engine's workspace directory (`tidepool run --workspace DIR`). The confinement is done
-- by the kernel in engine/host/fs.c (openat2 RESOLVE_BENEATH from a descriptor of the root),
-- not here: this file only shapes arguments and results.
--
-- Contract with the plugin loader (lua/host.lua, engine/host/host.c):
--   * the loader calls this chunk with one argument, a table whose `workspace` field is
--     the directory given to tp_engine_set_workspace, or nil. Without a workspace this
--     file returns an empty list: the fs tools are not offered at all;
--   * a handler's ctx.workspace is that same directory (the load-time value is used when
--     ctx has none);
--   * engine/host/fs.c is reachable as require("tidepool.fs"), that is
--     package.preload["tidepool.fs"] is tp__open_fs in the host state.
-- A handler raises {message = "path escapes the workspace: ../x"} on failure, which the
-- host reports to the script as tool.failed with that message (a table, so no position
-- of this file is put in front of it). Past a quota (the run's --fs-quota, read through
-- ctx.write_quota, or the workspace's growth cap, ctx.workspace_max) the code is
-- tool.denied and the message says which quota and how much is left.

local load_opts = ...
local workspace = type(load_opts) == "table" and load_opts.workspace or nil
if type(workspace) ~= "string" or workspace == "" then return {} end

local cfs = require("tidepool.fs")

local READ_CAP = 4 * 1024 * 1024   -- bytes fs.read returns at most
local LIST_CAP = 10000             -- entries fs.list returns at most
local PATH_MAX = 4096

-- One open root per workspace directory, kept for the engine's life.
local roots = {}

local function fail(msg, code)
  error({ message = msg, code = code == "quota" and "tool.denied" or nil }, 0)
end

local function root_of(ctx)
  local dir = type(ctx) == "table" and ctx.workspace or workspace
  local ws = roots[dir]
  if ws == nil then
    local msg
    local max = type(ctx) == "table" and ctx.workspace_max or load_opts.workspace_max
    ws, msg = cfs.open(dir, { max_growth = math.tointeger(max) or 0 })
    if ws == nil then fail(msg) end
    roots[dir] = ws
  end
  return ws
end

-- Raises the message of a nil, msg, code result; passes other results through.
local function check(v, msg, code, ...)
  if v == nil then fail(msg, code) end
  return v, msg, code, ...
end

-- The run's write quota as ws:write and ws:mkdir take it: left (-1: none) and quota.
local function quota_of(ctx)
  if type(ctx) ~= "table" or type(ctx.write_quota) ~= "function" then return -1, 0 end
  local left, quota = ctx.write_quota()
  if left == nil then return -1, 0 end
  return left, quota
end

local function charge(ctx, bytes)
  if bytes and bytes > 0 and type(ctx) == "table" and ctx.charge_writes then
    ctx.charge_writes(bytes)
  end
end

local function path_schema(description)
  return { type = "string", minLength = 1, maxLength = PATH_MAX, description = description }
end

-- The input of a tool whose only argument is a path.
local function path_input(description)
  return { type = "object", properties = { path = path_schema(description) },
           required = { "path" }, additionalProperties = false }
end

local ENTRY_TYPES = { "file", "directory", "symlink", "other" }

return {
  {
    name = "fs.read",
    description = "Read a UTF-8 text file of the workspace (at most 4 MiB).",
    input = path_input("File path, relative to the workspace root."),
    output = {
      type = "object",
      properties = { content = { type = "string", description = "The file's text." } },
      required = { "content" },
    },
    handler = function(args, ctx)
      local content = check(root_of(ctx):read(args.path, READ_CAP))
      if utf8.len(content) == nil then
        fail("not UTF-8 text (fs.read returns text files only): " .. args.path)
      end
      return { content = content }
    end,
  },
  {
    name = "fs.write",
    description = "Create or replace a file of the workspace with the given text. " ..
      "The file is replaced whole and at once; its directory must exist (see fs.mkdir). " ..
      "A run has a write quota (64 MiB unless the host set another; a write counts at " ..
      "least 4 KiB); past it, or past the workspace's growth cap, the call fails with " ..
      "tool.denied.",
    input = {
      type = "object",
      properties = {
        path = path_schema("File path, relative to the workspace root."),
        content = { type = "string", description = "The file's new text." },
      },
      required = { "path", "content" },
      additionalProperties = false,
    },
    output = {
      type = "object",
      properties = {
        bytes = { type = "integer", minimum = 0, description = "Bytes written." },
      },
      required = { "bytes" },
    },
    handler = function(args, ctx)
      local left, quota = quota_of(ctx)
      local bytes, charged = check(root_of(ctx):write(args.path, args.content, left, quota))
      charge(ctx, charged)
      return { bytes = bytes }
    end,
  },
  {
    name = "fs.list",
    description = "List a directory of the workspace, sorted by name (at most 10000 entries).",
    input = {
      type = "object",
      properties = {
        path = { type = "string", maxLength = PATH_MAX, default = ".",
                 description = "Directory path, relative to the workspace root." },
      },
      additionalProperties = false,
    },
    output = {
      type = "object",
      properties = {
        entries = {
          type = "array",
          description = "The directory's entries.",
          items = {
            type = "object",
            properties = {
              name = { type = "string", description = "Entry name." },
              type = { type = "string", enum = ENTRY_TYPES,
                       description = "Kind of entry; a symlink is not followed." },
              size = { type = "integer", minimum = 0, description = "Size in bytes." },
            },
            required = { "name", "type", "size" },
          },
        },
        truncated = { type = "boolean", description = "More entries exist than were listed." },
      },
      required = { "entries", "truncated" },
    },
    handler = function(args, ctx)
      local entries, truncated = check(root_of(ctx):list(args.path or ".", LIST_CAP))
      return { entries = entries, truncated = truncated }
    end,
  },
  {
    name = "fs.stat",
    description = "Type, size and modification time of a path in the workspace.",
    input = path_input("Path, relative to the workspace root."),
    output = {
      type = "object",
      properties = {
        type = { type = "string", enum = ENTRY_TYPES,
                 description = "Kind of entry; a symlink is not followed." },
        size = { type = "integer", minimum = 0, description = "Size in bytes." },
        mtime = { type = "integer", description = "Last modification, Unix time in seconds." },
      },
      required = { "type", "size", "mtime" },
    },
    handler = function(args, ctx)
      local st = check(root_of(ctx):stat(args.path))
      return { type = st.type, size = st.size, mtime = st.mtime }
    end,
  },
  {
    name = "fs.remove",
    description = "Remove a file, a symlink or an empty directory of the workspace.",
    input = path_input("Path, relative to the workspace root."),
    output = {
      type = "object",
      properties = { removed = { type = "boolean", description = "Always true." } },
      required = { "removed" },
    },
    handler = function(args, ctx)
      check(root_of(ctx):remove(args.path))
      return { removed = true }
    end,
  },
  {
    name = "fs.mkdir",
    description = "Create a directory in the workspace.",
    input = {
      type = "object",
      properties = {
        path = path_schema("Directory path, relative to the workspace root."),
        parents = { type = "boolean", default = false,
                    description = "Also create missing parent directories; " ..
                      "an existing directory is then not an error." },
      },
      required = { "path" },
      additionalProperties = false,
    },
    output = {
      type = "object",
      properties = { created = { type = "boolean", description = "Always true." } },
      required = { "created" },
    },
    handler = function(args, ctx)
      local left, quota = quota_of(ctx)
      local ok, msg, code, spent = root_of(ctx):mkdir(args.path, args.parents == true, left, quota)
      charge(ctx, ok and msg or spent)
      if not ok then fail(msg, code) end
      return { created = true }
    end,
  },
}
