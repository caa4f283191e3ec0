"""make bench: the Python SDK (sdk/python) against `tidepool mcp`, the process already
started.
  caller_tool_call_us_python  one caller tool call's round trip from a script through the
                              SDK (the tool returns at once), median of rounds of N calls
                              in one run, less a run without calls
  sdk_run_ms_python           tp.run("return 1"), median
Usage: PYTHONPATH=sdk/python/src python3 bench/sdk_python.py BINARY [ROUNDS]"""
import statistics
import sys
import time

from tidepool import Tidepool

binary = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
N = 200


def noop() -> dict:
    return {}


loop = f"for i = 1, {N} do tools.noop{{}} end return 1"
empty = f"for i = 1, {N} do end return 1"
with Tidepool(binary=binary, builtin_tools=False) as tp:
    for _ in range(20):
        tp.run(loop, tools=[noop])
        tp.run("return 1")
    runs, per = [], []
    for r in range(rounds):
        t0 = time.perf_counter()
        tp.run("return 1")
        runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tp.run(empty, tools=[noop])
        base = time.perf_counter() - t0
        if r % 4 == 0:
            t0 = time.perf_counter()
            tp.run(loop, tools=[noop])
            per.append((time.perf_counter() - t0 - base) * 1e6 / N)
    print(f"caller_tool_call_us_python: {statistics.median(per):.1f} us (Python SDK, median "
          f"of {len(per)} runs of {N} calls)")
    print(f"sdk_run_ms_python: {statistics.median(runs) * 1e3:.3f} ms (Python SDK, return 1, "
          f"median of {rounds})")
