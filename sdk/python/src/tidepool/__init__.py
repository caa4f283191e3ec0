"""tidepool for Python: code mode for agents. A model's Lua script runs in tidepool's
sandbox (a `tidepool mcp` child process) and calls your own Python functions as tools.

    from tidepool import Tidepool, tool

    @tool
    def add(a: int, b: int) -> int:
        "Adds two numbers."
        return a + b

    with Tidepool() as tp:
        env = tp.run("return tools.add{a = 1, b = 2}", tools=[add])
        assert env["result"] == 3

The guide is docs/sdk-python.md in tidepool's repository.
"""

from ._client import Envelope, Tidepool, TidepoolError, find_binary, model_view
from ._schema import Tool, schema_of_type, tool

__all__ = ["Tidepool", "TidepoolError", "Envelope", "Tool", "tool", "model_view",
           "find_binary", "schema_of_type"]
__version__ = "0.1.0"
