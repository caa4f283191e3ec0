-- Built-in tools: a key-value store in the engine's state store (engine/host/store.h):
-- in memory for as long as the engine lives (across runs of one engine; `tidepool mcp`
-- shares one store between the engines of its worker threads), or durable with
-- --state DIR (SQLite: across processes and restarts) or a Redis URL. Values are any JSON
-- value, stored as JSON text, so a later change to a table a script passed in cannot
-- reach the store.
local json = require("json")  -- the host state's codec (exact integers, [] vs {})
local store = require("tidepool.kv")  -- C: the engine's store connection (engine/host/kvstore.c)

local CAP = store.CAP              -- bytes of keys + JSON text of values, all entries (16 MiB)
local MAX_VALUE = store.MAX_VALUE  -- bytes of one value as JSON (1 MiB)

-- The answer of a store operation: at once, or (a remote store) a request to wait for.
local function answer(ctx, status, ...)
  if type(status) == "userdata" then
    return ctx.await(function(cb) status:wait(cb) end)
  end
  return status, ...
end

-- Raises the failure of an operation that did not answer "ok" (or "notfound").
local function failed(what, status, err)
  if status == "closed" then
    error(("the kv store closed before it answered %s; try again"):format(what), 0)
  end
  error(("the kv store could not %s: %s"):format(what, err or status), 0)
end

local KEY = { type = "string", minLength = 1, maxLength = 256,
              description = "The key: 1 to 256 characters." }
-- The input of a tool whose only argument is the key.
local KEY_ONLY = { type = "object", properties = { key = KEY }, required = { "key" },
                   additionalProperties = false }

return {
  {
    name = "kv.get",
    description = "Reads the value stored under a key. found is false (and value null) "
      .. "when the key is not set.",
    input = KEY_ONLY,
    output = {
      type = "object",
      properties = {
        value = { description = "The stored JSON value, or null when not found." },
        found = { type = "boolean", description = "Whether the key is set." },
      },
      required = { "value", "found" },
    },
    handler = function(args, ctx)
      local status, text, _, err = answer(ctx, store.get(args.key))
      if status == "notfound" then return { value = json.null, found = false } end
      if status ~= "ok" then failed(("read %q"):format(args.key), status, err) end
      return { value = json.decode(text), found = true }
    end,
  },
  {
    name = "kv.set",
    description = ("Stores any JSON value under a key, replacing what was there. One value "
      .. "is at most %d bytes as JSON (store a larger one in a file, and its path here); the "
      .. "store holds at most %d bytes (keys plus values as JSON) for all keys together; "
      .. "over that, the call fails: delete keys first."):format(MAX_VALUE, CAP),
    input = {
      type = "object",
      properties = {
        key = KEY,
        value = { description = "Any JSON value: object, array, string, number, boolean "
                  .. "or null (json.null)." },
      },
      required = { "key", "value" },
      additionalProperties = false,
    },
    output = {
      type = "object",
      properties = {
        bytes = { type = "integer", minimum = 0,
                  description = "Size of the stored value as JSON." },
        used = { type = "integer", minimum = 0, description = "Bytes the store holds now." },
      },
      required = { "bytes", "used" },
    },
    handler = function(args, ctx)
      local key = args.key
      local text = json.encode(args.value)
      if #text > MAX_VALUE then
        error({ code = "tool.failed", message = ("the value under %q is %d bytes as JSON, over "
          .. "the %d-byte (1 MiB) limit of one kv value; write it to a file with fs.write and "
          .. "store its path instead"):format(key, #text, MAX_VALUE) }, 0)
      end
      local status, _, used, err = answer(ctx, store.set(key, text))
      if status == "too_big" then
        error(("the kv store is full: storing %d bytes under %q would bring it to %d bytes, "
          .. "over its %d-byte limit; delete keys (kv.delete) or store less"):format(
          #text, key, used, CAP), 0)
      end
      if status ~= "ok" then failed(("store %q"):format(key), status, err) end
      return { bytes = #text, used = used }
    end,
  },
  {
    name = "kv.delete",
    description = "Removes a key. deleted is false when the key was not set.",
    input = KEY_ONLY,
    output = {
      type = "object",
      properties = { deleted = { type = "boolean", description = "Whether the key was set." } },
      required = { "deleted" },
    },
    handler = function(args, ctx)
      local status, _, _, err = answer(ctx, store.delete(args.key))
      if status ~= "ok" and status ~= "notfound" then
        failed(("delete %q"):format(args.key), status, err)
      end
      return { deleted = status == "ok" }
    end,
  },
  {
    name = "kv.list",
    description = "Lists the keys that start with prefix (all keys when it is left out), "
      .. "sorted, at most limit of them.",
    input = {
      type = "object",
      properties = {
        prefix = { type = "string", maxLength = 256,
                   description = "Only keys starting with this." },
        limit = { type = "integer", minimum = 1, maximum = 10000, default = 1000,
                  description = "At most this many keys (1 to 10000, default 1000)." },
      },
      additionalProperties = false,
    },
    output = {
      type = "object",
      properties = {
        keys = { type = "array", items = { type = "string" }, description = "Sorted keys." },
        truncated = { type = "boolean", description = "More keys matched than limit." },
      },
      required = { "keys", "truncated" },
    },
    handler = function(args, ctx)
      local limit = args.limit or 1000
      -- one key more than asked: whether more matched
      local status, text, _, err = answer(ctx, store.list(args.prefix or "", limit + 1))
      if status ~= "ok" then failed("list keys", status, err) end
      local keys = json.decode(text)
      local truncated = #keys > limit
      if truncated then keys[#keys] = nil end
      return { keys = json.array(keys), truncated = truncated }
    end,
  },
}
