"""An agent loop with the Python SDK: the model gets one tool, run_lua, whose description
lists your Python tools; each script it writes runs in tidepool and calls them; what it
reads back is tp.model_view(envelope). Anthropic's Messages API over urllib, so nothing
but the standard library and the SDK (pip install ./sdk/python).

    ANTHROPIC_API_KEY=... python3 examples/sdk/agent_loop.py "Which city is warmer?"

Without ANTHROPIC_API_KEY a scripted model plays the two steps, so it runs offline.
"""

import json
import os
import sys
import urllib.request
from typing import Literal

from tidepool import Tidepool, tool

CITIES = {"Paris": 21, "Oslo": 9, "Lima": 17}


@tool
def weather(city: str, unit: Literal["c", "f"] = "c") -> dict:
    """Current temperature of a city.

    Args:
        city: the city's name, e.g. Paris.
        unit: c (Celsius) or f (Fahrenheit).
    """
    if city not in CITIES:
        raise LookupError(f"no weather for {city}; known: {', '.join(CITIES)}")
    t = CITIES[city]
    return {"city": city, "temp": t if unit == "c" else t * 9 / 5 + 32, "unit": unit}


def cities() -> list[str]:
    """The cities weather knows."""
    return list(CITIES)


def anthropic(messages, tool_def):
    body = {"model": os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5"), "max_tokens": 2048,
            "tools": [{"name": tool_def["name"], "description": tool_def["description"],
                       "input_schema": tool_def["inputSchema"]}],
            "messages": messages}
    req = urllib.request.Request("https://api.anthropic.com/v1/messages",
                                 data=json.dumps(body).encode(), method="POST", headers={
                                     "x-api-key": os.environ["ANTHROPIC_API_KEY"],
                                     "anthropic-version": "2023-06-01",
                                     "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


SCRIPTED = """
local temps = {}
for _, c in ipairs(tools.cities{}) do temps[#temps + 1] = tools.weather{ city = c } end
table.sort(temps, function(a, b) return a.temp > b.temp end)
local ok, err = pcall(tools.weather, { city = "Atlantis" })
return { warmest = temps[1].city, temp = temps[1].temp, atlantis = err.message }
"""


def scripted(messages, tool_def):
    """Plays a model: first a script, then an answer from what the script returned."""
    last = messages[-1]["content"]
    if isinstance(last, str):
        return {"stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": tool_def["name"],
             "input": {"code": SCRIPTED}}]}
    view = json.loads(last[0]["content"])
    return {"stop_reason": "end_turn", "content": [
        {"type": "text", "text": f"{view['result']['warmest']} is warmest, at "
                                 f"{view['result']['temp']} C."}]}


def main():
    question = sys.argv[1] if len(sys.argv) > 1 else "Which city is warmest?"
    model = anthropic if os.environ.get("ANTHROPIC_API_KEY") else scripted
    my_tools = [weather, cities]
    with Tidepool(builtin_tools=False, limits={"timeout": "10s"}) as tp:
        tool_def = tp.describe(my_tools)
        messages = [{"role": "user", "content": question}]
        for _ in range(8):
            reply = model(messages, tool_def)
            messages.append({"role": "assistant", "content": reply["content"]})
            if reply["stop_reason"] != "tool_use":
                break
            results = []
            for block in reply["content"]:
                if block["type"] != "tool_use":
                    continue
                env = tp.run(block["input"].get("code", ""), tools=my_tools)
                print(f"[script] ok={env['ok']} calls={len(env['calls'])}", file=sys.stderr)
                results.append({"type": "tool_result", "tool_use_id": block["id"],
                                "content": json.dumps(tp.model_view(env)),
                                "is_error": not env["ok"]})
            messages.append({"role": "user", "content": results})
        print("".join(b.get("text", "") for b in messages[-1]["content"]
                      if isinstance(b, dict)))


if __name__ == "__main__":
    main()
