"""The Python SDK against the real `tidepool mcp` of this build (TIDEPOOL_BIN, else
build/tidepool): caller tools answered live (an async one, one that throws, one called
in a loop and in parallel()), arun and its cancellation, crashes kept out of this
process, a missing binary, schemas from type hints, dataclasses, TypedDicts and a
recursive one. Run: sh spec/sdk/python.sh (a venv with the package pip-installed)."""

import asyncio
import dataclasses
import os
import signal
import threading
import time
from typing import Literal, Optional, TypedDict

import pytest

from tidepool import Tidepool, TidepoolError, model_view, tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("TIDEPOOL_BIN") or os.path.join(ROOT, os.environ.get("BUILD", "build"),
                                                     "tidepool")
with open(os.path.join(ROOT, "spec", "sdk", "three_tools.lua"), encoding="utf-8") as f:
    SCRIPT = f.read()

WANT = {"code": "tool.failed", "message": "tools.explode failed: exploded: boom", "ok": False, "par": [101, 202],
        "sum": 36, "temp": 21}


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def tp():
    t = Tidepool(binary=BIN, builtin_tools=False)
    yield t
    pids = [s.pid for s in t._servers.values()]
    t.close()
    assert pids and not [p for p in pids if alive(p)], "close() ended every process"


def user_tools(seen):
    async def weather(city: str) -> dict:
        """Current weather for a city."""
        seen["weather"].append(city)
        await asyncio.sleep(0.02)
        return {"temp_c": 21}

    def explode(why: str) -> None:
        """Always fails."""
        seen["explode"].append(why)
        raise RuntimeError(f"exploded: {why}")

    lock = threading.Lock()

    def add(a: int, b: int) -> dict:
        """Adds two integers."""
        with lock:
            seen["add"].append((a, b))
        return {"sum": a + b}

    return [tool(weather), explode, add]


def check_seen(seen):
    assert seen["weather"] == ["Paris"]
    assert seen["explode"] == ["boom"]
    assert seen["add"][:3] == [(1, 10), (2, 10), (3, 10)]
    assert sorted(seen["add"][3:]) == [(100, 1), (200, 2)]


def test_three_tools_sync(tp):
    seen = {"weather": [], "explode": [], "add": []}
    env = tp.run(SCRIPT, tools=user_tools(seen))
    assert env["ok"], env.get("error")
    assert env["result"] == WANT
    check_seen(seen)
    assert [c["tool"] for c in env["calls"]] == ["weather", "explode", "add", "add", "add",
                                                 "add", "add"]
    assert env["calls"][1]["ok"] is False
    assert isinstance(env["stats"]["wall_ms"], (int, float))
    view = tp.model_view(env)
    assert view["calls"] == {"add": 5, "explode": 1, "weather": 1}
    assert view["result"] == WANT
    assert model_view(env) is view


def test_three_tools_async(tp):
    seen = {"weather": [], "explode": [], "add": []}
    weather, explode, add = user_tools(seen)
    env = asyncio.run(tp.arun(SCRIPT, tools={"weather": weather, "explode": explode, "add": add}))
    assert env["ok"], env.get("error")
    assert env["result"] == WANT
    check_seen(seen)


def test_one_process_many_runs_and_a_session(tp):
    pid = tp.pid
    for i in range(20):
        assert tp.run(f"return {i} * 2")["result"] == i * 2
    assert tp.pid == pid
    tp.run("counter = 41", session="s1")
    assert tp.run("counter = counter + 1 return counter", session="s1")["result"] == 42


def test_script_error_is_an_envelope(tp):
    env = tp.run("local x = nil; return x.y")
    assert env["ok"] is False
    assert env["error"]["code"] == "runtime"
    assert "attempt to index" in env["error"]["message"]


def test_cancelling_arun_cancels_the_run_and_the_call(tp):
    state = {"started": None, "cancelled": False}

    async def slow() -> None:
        """Waits forever."""
        state["started"].set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    async def main():
        state["started"] = asyncio.Event()
        task = asyncio.create_task(tp.arun("tools.slow{} return 1", tools=[slow]))
        await asyncio.wait_for(state["started"].wait(), 10)
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - t0 < 2
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert state["cancelled"], "the tool's task was cancelled"
    assert tp.run("return 7")["result"] == 7, "the process goes on serving"


def test_a_crash_stays_in_its_process():
    own = Tidepool(binary=BIN, builtin_tools=False)
    try:
        pid = own.pid
        started = threading.Event()

        def hang() -> None:
            started.set()
            time.sleep(1.0)

        def killer():
            started.wait(10)
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=killer, daemon=True).start()
        with pytest.raises(TidepoolError) as ei:
            own.run("tools.hang{} return 1", tools=[hang])
        assert ei.value.code == "process.exited"
        assert "signal 9" in str(ei.value)
        assert own.run("return 1 + 1")["result"] == 2
        assert own.pid != pid
    finally:
        own.close()


@pytest.mark.parametrize("how", ["arg", "env", "path"])
def test_missing_binary_says_how_to_install(how, monkeypatch):
    if how == "arg":
        where = "/nonexistent/tidepool (the binary argument)"
        make = lambda: Tidepool(binary="/nonexistent/tidepool")  # noqa: E731
    elif how == "env":
        monkeypatch.setenv("TIDEPOOL_BIN", "/nonexistent/tp")
        where = "TIDEPOOL_BIN=/nonexistent/tp"
        make = Tidepool
    else:
        monkeypatch.delenv("TIDEPOOL_BIN", raising=False)
        monkeypatch.setenv("PATH", "/nonexistent")
        where = "no `tidepool` on PATH (/nonexistent)"
        make = Tidepool
    with pytest.raises(TidepoolError) as ei:
        make()
    assert ei.value.code == "binary.missing"
    assert where in str(ei.value)
    assert "make && sudo make install" in str(ei.value) and "TIDEPOOL_BIN" in str(ei.value)


def test_schema_from_hints_checked_by_tidepool(tp):
    got = []

    @tool(name="book")
    def book_room(room: str, nights: int, kind: Literal["single", "double"] = "single",
                  note: Optional[str] = None, tags: list[str] = ()) -> dict:
        """Books a room.

        Args:
            room: the room's name.
            nights: how many nights.
        """
        got.append((room, nights, kind, note, tags))
        return {"ok": True}

    decl = book_room.declaration()
    assert decl["name"] == "book" and decl["description"] == "Books a room."
    s = decl["inputSchema"]
    assert s["required"] == ["room", "nights"]
    assert s["properties"]["room"] == {"type": "string", "description": "the room's name."}
    assert s["properties"]["kind"] == {"enum": ["single", "double"], "type": "string",
                                       "default": "single"}
    assert s["properties"]["note"] == {"type": ["string", "null"], "default": None}
    assert s["properties"]["tags"] == {"type": "array", "items": {"type": "string"},
                                       "default": []}
    env = tp.run("""
        local ok, err = pcall(tools.book, { room = "A", nights = "two" })
        local ok2, err2 = pcall(tools.book, { room = "A", nights = 1, kind = "triple" })
        local r = tools.book{ room = "Blue", nights = 2, kind = "double" }
        return { err.code, err2.code, r.ok }""", tools=[book_room])
    assert env["ok"], env.get("error")
    assert env["result"] == ["tool.invalid_input", "tool.invalid_input", True]
    assert got == [("Blue", 2, "double", None, ())], "only the good call reached Python"


@dataclasses.dataclass
class Node:
    """A tree node."""
    name: str
    children: list["Node"] = dataclasses.field(default_factory=list)


def test_recursive_dataclass_argument(tp):
    seen = []

    def count(n: Node) -> int:
        return 1 + sum(count(c) for c in n.children)

    def size(tree: Node) -> int:
        """Counts the nodes of a tree."""
        seen.append(tree)
        return count(tree)
    env = tp.run("""
        local ok, err = pcall(tools.size, { name = "x", children = { { name = 5 } } })
        local n = tools.size{ name = "a", children = { { name = "b", children = { { name = "c" } } },
                                                      { name = "d" } } }
        return { n = n, bad = err.code, where = err.message }""", tools=[size])
    assert env["ok"], env.get("error")
    assert env["result"]["n"] == 4
    assert env["result"]["bad"] == "tool.invalid_input"
    assert "children" in env["result"]["where"]
    assert len(seen) == 1 and isinstance(seen[0], Node)
    assert isinstance(seen[0].children[0].children[0], Node)


class Order(TypedDict):
    sku: str
    qty: int


def test_typeddict_argument_and_explicit_schema(tp):
    def place(order: Order) -> dict:
        return {"total": order["qty"] * 3, "sku": order["sku"]}

    def echo(**kw):
        return kw

    env = tp.run("""return { tools.place{ sku = "x", qty = 4 }, tools.echo{ z = 1 },
                            select(2, pcall(tools.place, { sku = "x" })).code }""",
                 tools={"place": place,
                        "echo": {"fn": echo, "description": "Echoes.",
                                 "input_schema": {"type": "object",
                                                  "properties": {"z": {"type": "integer"}}}}})
    assert env["ok"], env.get("error")
    assert env["result"] == [{"sku": "x", "total": 12}, {"z": 1}, "tool.invalid_input"]


def test_exception_code_and_message(tp):
    class Denied(Exception):
        code = "tool.denied"

    def guarded() -> None:
        raise Denied("not for you")

    def plain() -> None:
        raise KeyError

    def odd() -> object:
        return object()

    env = tp.run("""local _, a = pcall(tools.guarded, {}) local _, b = pcall(tools.plain, {})
                    local _, c = pcall(tools.odd, {})
                    return { a.code, a.message, b.code, b.message, c.code, c.message }""",
                 tools=[guarded, plain, odd])
    assert env["result"] == ["tool.denied", "tools.guarded was denied: not for you", "tool.failed",
                             "tools.plain failed: KeyError", "tool.failed",
                             "tools.odd failed: the tool's result is not JSON: object is not JSON"]


def test_describe_fits_and_lists_the_tools(tp):
    def lookup(user_id: int) -> dict:
        """Finds a user."""
        return {}

    d = tp.describe([lookup])
    assert d["name"] == "run_lua"
    assert d["inputSchema"]["required"] == ["code"]
    assert len(d["description"]) <= 2048
    assert "lookup{user_id: integer} -- Finds a user." in d["description"]


def test_example_agent_loop_runs_offline():
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["PATH"] = os.path.dirname(BIN) + os.pathsep + env.get("PATH", "")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "sdk", "agent_loop.py")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Paris is warmest, at 21 C.\n"
    assert r.stderr == "[script] ok=True calls=5\n"


def test_runs_at_once_from_threads_and_tasks_each_get_their_own_tools(tp):
    import concurrent.futures
    code = "local t = {} for i = 1, 20 do t[i] = tools.who{} end return table.concat(t)"

    def run_with(tag):
        def who() -> str:
            time.sleep(0.002)
            return tag
        return tp.run(code, tools=[who])["result"]

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert list(ex.map(run_with, "abcd")) == [c * 20 for c in "abcd"]

    async def arun_with(tag):
        async def who() -> str:
            await asyncio.sleep(0.002)
            return tag
        return (await tp.arun(code, tools=[who]))["result"]

    async def main():
        return await asyncio.gather(*(arun_with(c) for c in "wxyz"))

    assert asyncio.run(main()) == [c * 20 for c in "wxyz"]


def test_a_runs_own_limits(tp):
    tp.run("return 1")
    procs = len(tp._servers)
    env = tp.run("local n = 0 while true do n = n + 1 end", limits={"instructions": 100000})
    assert env["ok"] is False and env["error"]["code"] == "limit.instructions"
    assert len(tp._servers) == procs, "a lower limit needs no other process"
    env = asyncio.run(tp.arun("local t = os.clock() while os.clock() - t < 0.7 do end",
                              limits={"cpu": "200ms"}))
    assert env["error"]["code"] == "limit.cpu"
    assert len(tp._servers) == procs
    env = tp.run("return 5", limits={"timeout": "60s", "cpu": "30s"})
    assert env["result"] == 5
    assert len(tp._servers) == procs + 1, "limits above the server's: a process of their own"
    assert tp.run("local n = 0 for i = 1, 200000 do n = n + 1 end return n")["result"] == 200000
    with pytest.raises(TidepoolError) as ei:
        tp.run("return 1", limits={"bogus": 1})
    assert ei.value.code == "limits.unknown"


def test_policy_ask_goes_to_on_approval_or_is_denied(tmp_path):
    cfg = tmp_path / "ask.json"
    cfg.write_text('{"policy": {"default": "allow", "rules": '
                   '[{"tools": "pay", "effect": "ask", "reason": "money"}]}}')
    code = ("local ok, e = pcall(tools.pay, { cents = 5 }) "
            "return { ok, ok and e or e.code, not ok and e.message or nil }")
    paid, asked = [], []

    def pay(cents: int) -> str:
        paid.append(cents)
        return "paid"

    denied = "tools.pay was denied by the host's policy: the person declined: "
    cases = [(None, [False, "tool.denied", denied + "no one to ask: the application set "
                                                     "no on_approval"]),
             (lambda r: asked.append(r["message"]) or True, [True, "paid"]),
             (lambda r: False, [False, "tool.denied", denied + "declined by the application"])]
    for on_approval, want in cases:
        with Tidepool(binary=BIN, config=str(cfg), on_approval=on_approval) as own:
            assert own.run(code, tools=[pay])["result"] == want
    assert paid == [5]
    assert asked == ['A script wants to call tools.pay with {"cents":5}. Approve this call? '
                     '(money (policy rule 0))']


def test_a_name_the_script_cannot_write_is_adapted(tp):
    env = tp.run("return tools.lookup_user{ id = 7 }.id + tools.crm.find{}.n",
                 tools={"lookup-user": lambda id: {"id": id}, "crm.find": lambda: {"n": 1}})
    assert env["result"] == 8, env.get("error")


def _weather(city: str) -> dict:
    """Current weather for a city."""
    raise AssertionError("a paused run never calls its tools")


def test_paused_mode_then_resume(tp):
    code = ('local a, b = parallel(function() return tools.weather{city = "Paris"} end,\n'
            '  function() return tools.weather{city = "Oslo"} end)\nreturn a.temp_c - b.temp_c')
    paused = tp.run(code, tools={"weather": _weather}, mode="paused")
    assert (paused["ok"], paused["status"]) == (False, "paused"), paused
    assert sorted((p["kind"], p["tool"], p["args"]["city"]) for p in paused["pending"]) == \
        [("call", "weather", "Oslo"), ("call", "weather", "Paris")]
    by_city = {p["args"]["city"]: p["id"] for p in paused["pending"]}
    with pytest.raises(TidepoolError) as e:
        tp.resume(paused, [{"id": 999, "result": {}}])
    assert e.value.code == "caller.not_pending" and "has id 999 (pending: " in str(e.value)
    forged = tp.resume(paused, [{"id": by_city["Paris"], "binding": "ab" * 32, "result": {}}])
    assert (forged["ok"], forged["error"]["code"]) == (False, "caller.binding"), forged
    half = tp.resume(paused, [{"id": by_city["Paris"], "result": {"temp_c": 21}}])
    assert (half["status"], [p["args"]["city"] for p in half["pending"]]) == ("paused", ["Oslo"])
    done = tp.resume(half, [{"id": by_city["Oslo"], "result": {"temp_c": -4}}])
    assert (done["ok"], done["result"]) == (True, 25), done
    p2 = tp.run('local ok, e = pcall(tools.weather, {city = "X"}) return e.code .. ": " .. e.message',
                tools={"weather": _weather}, mode="paused")
    failed = tp.resume(p2, [{"id": p2["pending"][0]["id"], "error": ValueError("no such city")}])
    assert (failed["ok"], failed["result"]) == (True, "tool.failed: tools.weather failed: no such city")
    with pytest.raises(TypeError, match="mode is 'live' or 'paused'"):
        tp.run("return 1", mode="later")


def test_a_live_run_survives_kill_9_with_state(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("an-example-secret-of-32-characters-at-least")
    secret.chmod(0o600)
    seen = []
    with Tidepool(binary=BIN, builtin_tools=False,
                  args=["--state", str(tmp_path / "state"), "--secret-file", str(secret)]) as own:
        pid = own.pid

        def weather(city: str) -> dict:
            """Current weather for a city."""
            seen.append(city)
            if city == "Oslo":  # the process dies while the call is here
                os.kill(pid, signal.SIGKILL)
                for _ in range(200):
                    if not alive(pid):
                        break
                    time.sleep(0.025)
                time.sleep(0.3)
            return {"temp_c": 10}

        with pytest.raises(TidepoolError) as caught:
            own.run('local a = tools.weather{city = "Lima"} local b = tools.weather{city = "Oslo"} '
                    'return a.temp_c + b.temp_c', tools={"weather": weather})
        err = caught.value
        assert err.code == "process.exited", err
        assert "kept in the state store, paused at its calls in flight" in str(err), str(err)
        assert err.paused is not None and err.paused["status"] == "paused", err.paused
        assert [(c["kind"], c["id"], c["tool"], c["args"]["city"]) for c in err.paused["pending"]] == \
            [("call", 2, "weather", "Oslo")], err.paused
        done = own.resume(err.paused, [{"id": 2, "result": {"temp_c": 5}}])
        assert (done["ok"], done["result"], seen) == (True, 15, ["Lima", "Oslo"]), done
        assert own.pid != pid


def test_a_paused_run_survives_kill_9_with_state(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("an-example-secret-of-32-characters-at-least")
    secret.chmod(0o600)
    with Tidepool(binary=BIN, builtin_tools=False,
                  args=["--state", str(tmp_path / "state"), "--secret-file", str(secret)]) as own:
        paused = own.run('return tools.weather{city = "Lima"}.temp_c * 2',
                         tools={"weather": _weather}, mode="paused")
        assert paused["status"] == "paused", paused
        pid = own.pid
        os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            if not alive(pid):
                break
            time.sleep(0.025)
        time.sleep(0.05)
        done = own.resume(paused, [{"id": paused["pending"][0]["id"], "result": {"temp_c": 19}}])
        assert (done["ok"], done["result"]) == (True, 38), done
        assert own.pid != pid
