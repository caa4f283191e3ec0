-- Built-in tools: a key-value store kept in memory for as long as the engine lives
-- (across runs of one engine; not across processes). `tidepool mcp` shares one store
-- between the engines of its worker threads, so every call of one server sees the same
-- keys. Values are any JSON value, stored as JSON text, so a later change to a table a
-- script passed in cannot reach the store.
local json = require("json")  -- the host state's codec (exact integers, [] vs {})
local store = require("tidepool.kv")  -- C, shareable between engines (engine/host/kvstore.c)

local CAP = 16 * 1024 * 1024   -- bytes of keys + JSON text of values, all entries

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
    handler = function(args)
      local text = store.get(args.key)
      if text == nil then return { value = json.null, found = false } end
      return { value = json.decode(text), found = true }
    end,
  },
  {
    name = "kv.set",
    description = ("Stores any JSON value under a key, replacing what was there. The store "
      .. "holds at most %d bytes (keys plus values as JSON) for all keys together; "
      .. "over that, the call fails: delete keys first."):format(CAP),
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
    handler = function(args)
      local key = args.key
      local text = json.encode(args.value)
      local ok, used = store.set(key, text, CAP)
      if not ok then
        error(("the kv store is full: storing %d bytes under %q would bring it to %d bytes, "
          .. "over its %d-byte limit; delete keys (kv.delete) or store less"):format(
          #text, key, used, CAP), 0)
      end
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
    handler = function(args)
      return { deleted = store.delete(args.key) }
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
    handler = function(args)
      local keys, truncated = store.list(args.prefix or "", args.limit or 1000)
      return { keys = json.array(keys), truncated = truncated }
    end,
  },
}
