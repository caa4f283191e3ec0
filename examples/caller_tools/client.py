#!/usr/bin/env python3
"""A client of tidepool's caller-tools protocol in 60 lines of standard-library Python
(docs/caller-tools.md): it starts `tidepool mcp` on stdio, declares one tool of its own
on a run_lua call, answers each tidepool/callTool request the script's calls send, and
prints the run's result.

    python3 examples/caller_tools/client.py [path/to/tidepool]
"""
import json
import subprocess
import sys

TIDEPOOL = sys.argv[1] if len(sys.argv) > 1 else "tidepool"

# The caller's own tool: a plain function, declared with its JSON Schema.
def price(args):
    prices = {"apple": 0.5, "pear": 0.75}
    if args["fruit"] not in prices:
        raise ValueError("no price for " + args["fruit"])
    return {"eur": prices[args["fruit"]] * args["n"]}

TOOLS = {"price": price}
DECLARATIONS = [{
    "name": "price", "description": "The price of n pieces of a fruit, in euros.",
    "inputSchema": {"type": "object", "required": ["fruit", "n"], "properties": {
        "fruit": {"type": "string"}, "n": {"type": "integer", "minimum": 1}}},
    "outputSchema": {"type": "object", "properties": {"eur": {"type": "number"}}},
}]

SCRIPT = """
local total = 0
for _, f in ipairs({"apple", "pear"}) do total = total + tools.price{fruit = f, n = 4}.eur end
local ok, err = pcall(tools.price, {fruit = "kiwi", n = 1})
return {total = total, kiwi = err.message}
"""

proc = subprocess.Popen([TIDEPOOL, "mcp", "--no-builtin-tools"], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True)

def send(msg):
    proc.stdin.write(json.dumps(msg) + "\n")
    proc.stdin.flush()

def wait_for(id_):
    """Reads messages until the response to id_, answering tidepool/callTool meanwhile."""
    for line in proc.stdout:
        msg = json.loads(line)
        if msg.get("method") == "tidepool/callTool":
            p = msg["params"]
            try:
                answer = {"result": TOOLS[p["tool"]](p["args"])}
            except Exception as e:  # the script sees tool.failed with this message
                answer = {"error": {"message": str(e), "code": "tool.failed"}}
            send({"jsonrpc": "2.0", "id": msg["id"], "result": answer})
        elif msg.get("id") == id_:
            return msg
    raise SystemExit("tidepool mcp ended")

send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "clientInfo": {"name": "example", "version": "1"},
    "capabilities": {"experimental": {"tidepool/callerTools": {"version": 1}}}}})
wait_for(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "run_lua", "arguments": {"code": SCRIPT},
    "_meta": {"tidepool/callerTools": {"version": 1, "tools": DECLARATIONS}}}})
print(json.dumps(wait_for(2)["result"]["structuredContent"]["result"], sort_keys=True))
proc.stdin.close()
proc.wait()
