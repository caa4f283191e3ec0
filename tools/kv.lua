-- Built-in tools: a key-value store kept in memory for as long as the engine lives
-- (across runs of one engine; not across processes). Values are any JSON value, stored
-- as JSON text, so a later change to a table a script passed in cannot reach the store.
local json = require("json")  -- the host state's codec (exact integers, [] vs {})

local CAP = 16 * 1024 * 1024   -- bytes of keys + JSON text of values, all entries

local store = {}                -- key -> JSON text
local used = 0

local KEY = { type = "string", minLength = 1, maxLength = 256,
              description = "The key: 1 to 256 characters." }
-- The input of a tool whose only argument is the key.
local KEY_ONLY = { type = "object", properties = { key = KEY }, required = { "key" },
                   additionalProperties = false }

local function cost(key, text) return #key + #text end

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
      local text = store[args.key]
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
      local old = store[key]
      local after = used - (old and cost(key, old) or 0) + cost(key, text)
      if after > CAP then
        error(("the kv store is full: storing %d bytes under %q would bring it to %d bytes, "
          .. "over its %d-byte limit; delete keys (kv.delete) or store less"):format(
          #text, key, after, CAP), 0)
      end
      store[key] = text
      used = after
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
      local old = store[args.key]
      if old == nil then return { deleted = false } end
      store[args.key] = nil
      used = used - cost(args.key, old)
      return { deleted = true }
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
      local prefix, limit = args.prefix or "", args.limit or 1000
      local keys = {}
      for k in pairs(store) do
        if k:sub(1, #prefix) == prefix then keys[#keys + 1] = k end
      end
      table.sort(keys)
      local truncated = #keys > limit
      for i = #keys, limit + 1, -1 do keys[i] = nil end
      return { keys = json.array(keys), truncated = truncated }
    end,
  },
}
