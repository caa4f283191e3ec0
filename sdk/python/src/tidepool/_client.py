"""The client: one `tidepool mcp` child process, many runs, the caller's tools answered
live (docs/caller-tools.md). Standard library only."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import json
import os
import queue
import re
import shutil
import subprocess
import threading
import weakref
from typing import Any, Callable, Iterable, Mapping

from ._schema import Tool, as_tool

__all__ = ["Tidepool", "TidepoolError", "Envelope", "find_binary", "model_view"]

PROTOCOL = "2025-06-18"
CALLER_CAP = "tidepool/callerTools"
ERROR_CODES = {"tool.failed", "tool.denied", "tool.timeout", "tool.unavailable",
               "tool.rate_limited", "tool.invalid_input"}
INSTALL_HINT = ("Install tidepool (from a checkout: `make && sudo make install`, or the "
                "Debian package `tidepool`), or pass Tidepool(binary='/path/to/tidepool'), "
                "or set TIDEPOOL_BIN.")
LIMITS = ("memory", "instructions", "cpu", "timeout", "max-output", "max-source",
          "max-result", "tool-calls", "tool-calls-per-tool", "tool-in-flight", "tool-bytes",
          "tool-timeout", "fs-quota")
STDERR_KEEP = 4096


class TidepoolError(Exception):
    """A failure of tidepool itself (not of a script: that is an envelope with ok False).
    code: binary.missing, process.exited, process.spawn, caller.unsupported, limits.unknown,
    or the JSON-RPC error code of a protocol fault."""

    def __init__(self, message: str, code: Any = None, data: Any = None):
        super().__init__(message)
        self.code = code
        self.data = data
        # process.exited of a live run the server keeps in its state store (--state): the
        # run paused at the calls that were in flight, for resume(error.paused, results)
        self.paused: Envelope | None = None


class Envelope(dict):
    """The result envelope: ok, result, error, logs, calls, stats (status, run and pending
    when paused). model_view() is what a model reads of it."""
    view: dict | None = None


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_binary(binary: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The binary: the argument, else $TIDEPOOL_BIN, else `tidepool` on $PATH."""
    env = os.environ if env is None else env
    if binary:
        if _executable(binary):
            return binary
        raise TidepoolError(f"tidepool binary not found: {binary} (the binary argument) is "
                            f"not an executable file. {INSTALL_HINT}", "binary.missing")
    if env.get("TIDEPOOL_BIN"):
        b = env["TIDEPOOL_BIN"]
        if _executable(b):
            return b
        raise TidepoolError(f"tidepool binary not found: TIDEPOOL_BIN={b} is not an "
                            f"executable file. {INSTALL_HINT}", "binary.missing")
    found = shutil.which("tidepool", path=env.get("PATH", ""))
    if found:
        return found
    raise TidepoolError(f"tidepool binary not found: no `tidepool` on PATH "
                        f"({env.get('PATH') or 'empty'}). {INSTALL_HINT}", "binary.missing")


def _script_name(name: str) -> str:
    """A name the script can write: letters, digits, _ and dots between parts
    ("lookup-user" is tools.lookup_user)."""
    n = re.sub(r"[^A-Za-z0-9_.]", "_", str(name))
    n = re.sub(r"\.{2,}", ".", n).strip(".")
    n = ".".join("_" + p if p[:1].isdigit() else p for p in n.split("."))
    return n or "_"


def _limit_flags(limits: Mapping[str, Any] | None) -> list[str]:
    out: list[str] = []
    for k, v in (limits or {}).items():
        if v is None:
            continue
        flag = "".join("-" + c.lower() if c.isupper() else c for c in k).replace("_", "-")
        if flag not in LIMITS:
            raise TidepoolError(f"unknown limit {k!r}: the limits are {', '.join(LIMITS)} "
                                f"(snake_case)", "limits.unknown")
        out += ["--" + flag, str(v)]
    return out


def _envelope(res: dict) -> Envelope:
    view = res.get("structuredContent")
    content = res.get("content")
    if view is None and isinstance(content, list) and content and \
            content[0].get("type") == "text":
        try:
            view = json.loads(content[0]["text"])
        except ValueError:
            view = {"ok": False, "error": {"code": "runtime", "message": content[0]["text"]}}
    view = view or {}
    meta = res.get("_meta") or {}
    env = Envelope(ok=view.get("ok") is True)
    if "result" in view:
        env["result"] = view["result"]
    if view.get("error"):
        env["error"] = view["error"]
    env["logs"] = view.get("logs") or []
    env["calls"] = meta.get("tidepool/calls") or []
    env["stats"] = meta.get("tidepool/stats") or {}
    for k in ("status", "run", "pending", "session", "warnings", "truncated"):
        if k in view:
            env[k] = view[k]
    env.view = view
    return env


def model_view(envelope: Mapping) -> dict:
    """What a model reads of a run: ok, result or error, logs, calls counted by tool,
    failed calls in full (as `tidepool mcp` gives it)."""
    view = getattr(envelope, "view", None)
    if view is not None:
        return view
    calls: dict = {}
    for c in envelope.get("calls") or []:
        calls[c["tool"]] = calls.get(c["tool"], 0) + 1
    v = {"ok": envelope.get("ok"), "calls": calls, "logs": envelope.get("logs") or []}
    if envelope.get("ok"):
        v["result"] = envelope.get("result")
    else:
        v["error"] = envelope.get("error")
    return v


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "model_dump"):  # pydantic models, duck-typed
        return value.model_dump()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _error_of(e: BaseException) -> dict:
    msg = str(e) or type(e).__name__
    code = getattr(e, "code", None)
    return {"message": msg, "code": code if code in ERROR_CODES else "tool.failed"}


class _Run:
    __slots__ = ("id", "tools", "put", "calls", "server_run", "loop", "held")

    def __init__(self, rid: int, tools: dict, put: Callable):
        self.id = rid
        self.tools = tools
        self.put = put          # put((kind, message)) from the reader thread
        self.calls: dict = {}   # request id -> a cancel hook (future or task)
        self.server_run = None
        self.loop = None
        self.held: dict = {}    # request id -> its pending entry (a stored run's call)


class _Server:
    """One `tidepool mcp` process: a reader thread sorts its lines to the runs."""

    def __init__(self, argv: list[str], env: Mapping[str, str] | None, on_approval):
        self.argv = argv
        self.on_approval = on_approval
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.pending: dict = {}   # request id -> _Run (or an initialize waiter)
        self.runs: dict = {}      # run_lua request id -> _Run
        self.stderr = ""
        self.exited: int | None = None
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE,
                                         env=dict(env) if env is not None else None)
        except OSError as e:
            raise TidepoolError(f"could not start {argv[0]}: {e}", "process.spawn") from e
        self.pid = self.proc.pid
        self.out = self.proc.stdin
        threading.Thread(target=self._read, name=f"tidepool-{self.pid}", daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        # elicitation always: a call the server's policy holds for a person is asked of
        # on_approval, or declined at once, never left as a paused run nobody resumes
        caps: dict = {"experimental": {CALLER_CAP: {"version": 1}}, "elicitation": {}}
        q: queue.SimpleQueue = queue.SimpleQueue()
        waiter = _Run(0, {}, q.put)
        init = self._call_sync("initialize", {"protocolVersion": PROTOCOL,
                                              "capabilities": caps,
                                              "clientInfo": {"name": "tidepool-python",
                                                             "version": "0.1.0"}}, waiter, q)
        cap = ((init.get("capabilities") or {}).get("experimental") or {}).get(CALLER_CAP)
        self.caller_tools = cap
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}})

    def _call_sync(self, method: str, params: dict, waiter: _Run, q) -> dict:
        rid = next(self.ids)
        self.pending[rid] = waiter
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        kind, msg = q.get()
        if kind == "exit":
            raise self.exit_error()
        if "error" in msg:
            e = msg["error"]
            raise TidepoolError(e.get("message", "error"), e.get("code"), e.get("data"))
        return msg.get("result") or {}

    def send(self, msg: dict) -> bool:
        line = (json.dumps(msg, separators=(",", ":"), ensure_ascii=False,
                           default=_jsonable) + "\n").encode()
        with self.lock:
            if self.exited is not None:
                return False
            try:
                self.out.write(line)
                self.out.flush()
                return True
            except (BrokenPipeError, ValueError, OSError):
                return False

    def answer(self, rid: Any, payload: dict) -> None:
        try:
            sent = self.send({"jsonrpc": "2.0", "id": rid, "result": payload})
        except (TypeError, ValueError) as e:
            sent = self.send({"jsonrpc": "2.0", "id": rid, "result": {"error": {
                "message": f"the tool's result is not JSON: {e}", "code": "tool.failed"}}})
        if sent:
            for r in list(self.runs.values()):
                r.held.pop(rid, None)

    def _read(self) -> None:
        f = self.proc.stdout
        for raw in f:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            method = msg.get("method")
            if method is None:
                run = self.pending.pop(msg.get("id"), None)
                if run is not None:
                    try:
                        run.put(("response", msg))
                    except RuntimeError:  # an arun whose event loop is closed
                        pass
            elif "id" in msg:
                self._on_request(msg)
            elif method == "notifications/cancelled":
                rid = (msg.get("params") or {}).get("requestId")
                for run in list(self.runs.values()):
                    hook = run.calls.get(rid)
                    if hook is not None:
                        hook()
                        break
        self.proc.wait()
        with self.lock:
            self.exited = self.proc.returncode
        for run in list(self.pending.values()) + list(self.runs.values()):
            try:
                run.put(("exit", None))
            except RuntimeError:  # an arun whose event loop is closed
                pass
        self.pending.clear()

    def _read_stderr(self) -> None:
        for raw in self.proc.stderr:
            self.stderr = (self.stderr + raw.decode("utf-8", "replace"))[-STDERR_KEEP:]

    def _on_request(self, msg: dict) -> None:
        method = msg["method"]
        if method == "tidepool/callTool":
            p = msg.get("params") or {}
            run = self._run_of(p)
            if run is None or p.get("tool") not in run.tools:
                self.answer(msg["id"], {"error": {"message": f"no caller tool {p.get('tool')} "
                                                  f"in this run", "code": "tool.unavailable"}})
                return
            if isinstance(p.get("binding"), str):  # a stored run's: see exit_error
                run.held[msg["id"]] = {"kind": "call", "id": p.get("id"), "tool": p.get("tool"),
                                       "args": p.get("args"), "binding": p["binding"],
                                       "run": p.get("run")}
            try:
                run.put(("call", msg))
            except RuntimeError:  # an arun whose event loop is closed
                self.answer(msg["id"], {"error": {"message": "the run's event loop is closed",
                                                  "code": "tool.unavailable"}})
        elif method == "elicitation/create":
            threading.Thread(target=self._elicit, args=(msg,), daemon=True).start()
        elif method == "ping":
            self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
        else:
            self.send({"jsonrpc": "2.0", "id": msg["id"], "error": {
                "code": -32601, "message": f"tidepool-python does not handle {method}"}})

    def _run_of(self, p: dict) -> _Run | None:
        for key in (p.get("request"), (p.get("_meta") or {}).get("progressToken")):
            if key is not None and key in self.runs:
                return self.runs[key]
        found = None
        for r in list(self.runs.values()):
            if p.get("run") is not None and r.server_run == p.get("run"):
                return r
            if p.get("tool") in r.tools:
                if found is not None:
                    return None
                found = r
        return found

    def _elicit(self, msg: dict) -> None:
        p = msg.get("params") or {}
        ok = False
        try:
            if self.on_approval:
                ok = bool(self.on_approval({"message": p.get("message"), "request": p}))
        except Exception:  # noqa: BLE001 - a failing approver declines
            ok = False
        content = {"approve": True} if ok else {
            "approve": False, "note": "declined by the application" if self.on_approval
            else "no one to ask: the application set no on_approval"}
        self.send({"jsonrpc": "2.0", "id": msg["id"],
                   "result": {"action": "accept", "content": content}})

    def exit_error(self, run: _Run | None = None) -> TidepoolError:
        tail = "\n".join(self.stderr.strip().splitlines()[-5:])
        how = f"signal {-self.exited}" if (self.exited or 0) < 0 else f"status {self.exited}"
        msg = f"the tidepool process exited ({how})" + (f": {tail}" if tail else "")
        calls = list(run.held.values()) if run is not None else []
        if not calls:
            return TidepoolError(msg, "process.exited")
        # a stored run whose calls were here: the store has it paused at them
        e = TidepoolError(f"{msg}; run {calls[0]['run']} is kept in the state store, paused "
                          "at its calls in flight: resume(error.paused, results) answers them",
                          "process.exited")
        paused = Envelope(ok=False, status="paused", run=calls[0]["run"],
                          pending=[{k: v for k, v in c.items() if k != "run"} for c in calls])
        paused.update(logs=[], calls=[], stats={})
        e.paused = paused
        return e

    def close(self, grace: float = 2.0) -> None:
        with self.lock:
            try:
                self.out.close()
            except OSError:
                pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Tidepool:
    """Runs Lua scripts in tidepool's sandbox through one `tidepool mcp` child process,
    started on the first run and reused. Tools are the caller's own functions.

        tp = Tidepool()
        env = tp.run("return tools.add{a = 1, b = 2}", tools=[add])
    """

    def __init__(self, binary: str | None = None, config: str | None = None,
                 limits: Mapping[str, Any] | None = None, *, args: Iterable[str] = (),
                 builtin_tools: bool = True, env: Mapping[str, str] | None = None,
                 on_approval: Callable[[dict], bool] | None = None):
        self.binary = find_binary(binary)
        self.config = config
        self.limits = dict(limits or {})
        self.args = list(args)
        self.builtin_tools = builtin_tools
        self.env = env
        self.on_approval = on_approval
        self._servers: dict = {}
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._aio: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._finalizer = weakref.finalize(self, Tidepool._close_all, self._servers)

    # -- processes --------------------------------------------------------------------

    def _argv(self, limits: Mapping[str, Any] | None) -> list[str]:
        argv = [self.binary, "mcp"]
        if self.config:
            argv += ["--config", str(self.config)]
        if not self.builtin_tools:
            argv.append("--no-builtin-tools")
        argv += _limit_flags(self.limits) + self.args + _limit_flags(limits)
        return argv

    def _server(self, limits: Mapping[str, Any] | None = None) -> _Server:
        key = tuple(_limit_flags(limits))
        with self._lock:
            if self._closed:
                raise TidepoolError("this Tidepool is closed", "closed")
            s = self._servers.get(key)
            if s is None or s.exited is not None:
                s = _Server(self._argv(limits), self.env, self.on_approval)
                self._servers[key] = s
            return s

    async def _aserver(self, limits: Mapping[str, Any] | None) -> _Server:
        """The process for these limits; one still to start starts off the event loop."""
        s = self._servers.get(tuple(_limit_flags(limits)))
        if s is not None and s.exited is None and not self._closed:
            return s
        return await asyncio.get_running_loop().run_in_executor(None, self._server, limits)

    @property
    def pid(self) -> int:
        """The pid of the default process (started if needed)."""
        return self._server().pid

    @staticmethod
    def _close_all(servers: dict) -> None:
        for s in list(servers.values()):
            s.close()
        servers.clear()

    def close(self) -> None:
        """Ends every process this object started (each finishes what it was given)."""
        with self._lock:
            self._closed = True
        Tidepool._close_all(self._servers)
        if self._pool:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._aio:
            self._aio.call_soon_threadsafe(self._aio.stop)

    def __enter__(self) -> "Tidepool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- runs -------------------------------------------------------------------------

    @staticmethod
    def _tools(tools: Any) -> dict:
        out: dict = {}
        if tools is None:
            return out
        items = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
        for name, value in items:
            t = as_tool(name, value)
            sname = _script_name(t.name)
            if sname != t.name:
                t = as_tool(sname, t)
            if t.name in out:
                raise TidepoolError(f"two tools are tools.{t.name} in a script: rename one",
                                    "tool.invalid")
            out[t.name] = t
        return out

    def _params(self, server: _Server, rid: int, code: str, tools: dict,
                session: str | None, meta_limits: dict | None = None,
                mode: str = "live") -> dict:
        if not isinstance(code, str):
            raise TypeError("run(code): code must be a str")
        if mode not in ("live", "paused"):
            raise TypeError(f"run(code, mode=...): mode is 'live' or 'paused', not {mode!r}")
        if tools and not server.caller_tools:
            raise TidepoolError(f"{self.binary} does not offer caller tools (the "
                                f"\"{CALLER_CAP}\" capability): it is older than this SDK; "
                                f"update tidepool", "caller.unsupported")
        args: dict = {"code": code}
        if session is not None:
            args["session"] = str(session)
        params: dict = {"name": "run_lua", "arguments": args}
        if tools or meta_limits:
            params["_meta"] = {}
        if tools:
            params["_meta"][CALLER_CAP] = {
                "version": 1, "mode": mode, "tools": [t.declaration() for t in tools.values()]}
        if meta_limits:
            params["_meta"]["tidepool/limits"] = meta_limits
        return params

    @staticmethod
    def _meta_limits(limits: Mapping[str, Any] | None, session: str | None) -> dict | None:
        """A run's own limits for its _meta["tidepool/limits"] (the server lowers its
        own for that run), or None when they go to a process of their own (a session)."""
        if not _limit_flags(limits) or session is not None:
            return None
        return {"".join("_" + c.lower() if c.isupper() else c for c in k).replace("-", "_"): v
                for k, v in limits.items() if v is not None}

    @staticmethod
    def _refused(e: TidepoolError) -> bool:
        """The server refused a run's own limits (a raise, a limit it cannot lower per
        run): they go to a process started with them instead."""
        return e.code == -32602 and '"tidepool/limits"' in str(e)

    @staticmethod
    def _result(server: _Server, msg: dict) -> Envelope:
        if "error" in msg:
            e = msg["error"]
            raise TidepoolError(e.get("message", "error"), e.get("code"), e.get("data"))
        return _envelope(msg.get("result") or {})

    def run(self, code: str, tools: Any = None, session: str | None = None,
            limits: Mapping[str, Any] | None = None, mode: str = "live") -> Envelope:
        """Runs code and returns its envelope. tools: a list of functions / Tools, or a
        dict name -> function. Plain functions run on this thread (calls made together
        with parallel() on a thread pool), async ones on a loop of this object's.
        mode="paused": the tools are not called; the run comes back with status
        "paused" and its pending calls, answered with resume()."""
        tools = self._tools(tools)
        meta = self._meta_limits(limits, session)
        if meta is None:
            return self._run_on(self._server(limits), code, tools, session, None, mode)
        try:
            return self._run_on(self._server(), code, tools, session, meta, mode)
        except TidepoolError as e:
            if not self._refused(e):
                raise
            return self._run_on(self._server(limits), code, tools, session, None, mode)

    def resume(self, paused: Mapping, results: Any = (),
               decisions: list | None = None) -> Envelope:
        """Resumes a run that came back paused (run(..., mode="paused")): results answer
        its pending calls, [{"id": ..., "result": ...} | {"id": ..., "error": {"message":
        ..., "code": ...}} (or an exception)], each binding copied from paused["pending"];
        decisions answer pending approvals as resume_run takes them. Returns the run's
        envelope: its end, or paused again with what is left. With the server's --state
        (and --secret-file) the run survives a restart of the process."""
        if not isinstance(paused, Mapping) or not isinstance(paused.get("run"), str):
            raise TypeError("resume(paused, results): paused is the envelope of a paused run "
                            "(status \"paused\", with run and pending)")
        pending = [p for p in (paused.get("pending") or [])
                   if isinstance(p, Mapping) and p.get("kind") == "call"]
        answers = []
        for i, r in enumerate(results):
            if not isinstance(r, Mapping) or "id" not in r or \
                    ("result" not in r and "error" not in r):
                raise TypeError(f"resume: results[{i}] is {{id, result}} or "
                                f"{{id, error: {{message}}}}")
            p = next((q for q in pending if q.get("id") == r["id"]), None)
            if p is None and not r.get("binding"):
                ids = ", ".join(str(q.get("id")) for q in pending) or "none"
                raise TidepoolError(f"resume: no pending call of run {paused['run']} has id "
                                    f"{r['id']!r} (pending: {ids})", "caller.not_pending")
            out: dict = {"id": r["id"], "binding": r.get("binding") or p["binding"]}
            if "error" in r:
                e = r["error"]
                out["error"] = _error_of(e) if isinstance(e, BaseException) else \
                    ({"message": e} if isinstance(e, str) else e)
            else:
                out["result"] = r["result"]
            answers.append(out)
        args: dict = {"run": paused["run"]}
        if answers:
            args["results"] = answers
        if decisions:
            args["decisions"] = decisions
        server = self._server()
        q: queue.SimpleQueue = queue.SimpleQueue()
        res = server._call_sync("tools/call", {"name": "resume_run", "arguments": args},
                                _Run(0, {}, q.put), q)
        return _envelope(res)

    def _run_on(self, server: _Server, code: str, tools: dict, session: str | None,
                meta: dict | None, mode: str = "live") -> Envelope:
        rid = next(server.ids)
        params = self._params(server, rid, code, tools, session, meta, mode)
        q: queue.SimpleQueue = queue.SimpleQueue()
        run = _Run(rid, tools, q.put)
        server.runs[rid] = run
        server.pending[rid] = run
        try:
            server.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
            while True:
                kind, msg = q.get()
                if kind == "response":
                    return self._result(server, msg)
                if kind == "exit":
                    raise server.exit_error(run)
                # a call: run it here unless more are waiting (parallel): then on the pool
                calls = [msg]
                while True:
                    try:
                        kind2, msg2 = q.get_nowait()
                    except queue.Empty:
                        break
                    if kind2 != "call":
                        q.put((kind2, msg2))  # after the calls: order among calls is free
                        break
                    calls.append(msg2)
                if len(calls) == 1:
                    self._call_here(server, run, calls[0])
                else:
                    for c in calls:
                        self._call_pooled(server, run, c)
        except BaseException:
            if rid in server.pending:  # interrupted: the run is cancelled
                server.pending.pop(rid, None)
                server.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                             "params": {"requestId": rid, "reason": "interrupted"}})
            raise
        finally:
            server.runs.pop(rid, None)

    def _call_here(self, server: _Server, run: _Run, msg: dict) -> None:
        p = msg["params"]
        t: Tool = run.tools[p["tool"]]
        if t.is_async:
            fut = asyncio.run_coroutine_threadsafe(self._acall(t, p.get("args")),
                                                   self._loop())
            run.calls[msg["id"]] = fut.cancel
            fut.add_done_callback(lambda f, rid=msg["id"]: self._done(server, run, rid, f))
            return
        try:
            a, kw = t.bind(p.get("args"))
            out = t.fn(*a, **kw)
            server.answer(msg["id"], {"result": out})
        except Exception as e:  # noqa: BLE001 - the script gets it as tool.failed
            server.answer(msg["id"], {"error": _error_of(e)})

    def _call_pooled(self, server: _Server, run: _Run, msg: dict) -> None:
        p = msg["params"]
        t: Tool = run.tools[p["tool"]]
        if t.is_async:
            return self._call_here(server, run, msg)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=16, thread_name_prefix="tidepool-tool")
        self._pool.submit(self._call_here, server, run, msg)

    @staticmethod
    async def _acall(t: Tool, args: Any) -> Any:
        a, kw = t.bind(args)
        return await t.fn(*a, **kw)

    @staticmethod
    def _done(server: _Server, run: _Run, rid: Any, f) -> None:
        run.calls.pop(rid, None)
        if f.cancelled():
            server.answer(rid, {"error": {"message": "cancelled", "code": "tool.failed"}})
            return
        e = f.exception()
        if e is not None:
            server.answer(rid, {"error": _error_of(e)})
        else:
            server.answer(rid, {"result": f.result()})

    def _loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._aio is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="tidepool-async",
                                 daemon=True).start()
                self._aio = loop
            return self._aio

    async def arun(self, code: str, tools: Any = None, session: str | None = None,
                   limits: Mapping[str, Any] | None = None) -> Envelope:
        """run(), awaitable: async tools run on the caller's loop, plain ones in its
        default executor. Cancelling the task cancels the run and its calls in flight."""
        loop = asyncio.get_running_loop()
        tools = self._tools(tools)
        meta = self._meta_limits(limits, session)
        if meta is None:
            server = await self._aserver(limits)
            return await self._arun_on(loop, server, code, tools, session, None)
        try:
            server = await self._aserver(None)
            return await self._arun_on(loop, server, code, tools, session, meta)
        except TidepoolError as e:
            if not self._refused(e):
                raise
            server = await self._aserver(limits)
            return await self._arun_on(loop, server, code, tools, session, None)

    async def _arun_on(self, loop, server: _Server, code: str, tools: dict,
                       session: str | None, meta: dict | None) -> Envelope:
        rid = next(server.ids)
        params = self._params(server, rid, code, tools, session, meta)
        q: asyncio.Queue = asyncio.Queue()
        run = _Run(rid, tools, lambda item: loop.call_soon_threadsafe(q.put_nowait, item))
        server.runs[rid] = run
        server.pending[rid] = run
        tasks: set = set()
        try:
            server.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
            while True:
                kind, msg = await q.get()
                if kind == "response":
                    return self._result(server, msg)
                if kind == "exit":
                    raise server.exit_error(run)
                task = loop.create_task(self._acall_one(server, run, msg))
                tasks.add(task)
                run.calls[msg["id"]] = lambda task=task: loop.call_soon_threadsafe(task.cancel)
                task.add_done_callback(tasks.discard)
        except BaseException:
            if rid in server.pending:
                server.pending.pop(rid, None)
                server.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                             "params": {"requestId": rid, "reason": "cancelled"}})
            for task in tasks:
                task.cancel()
            raise
        finally:
            server.runs.pop(rid, None)

    @staticmethod
    async def _acall_one(server: _Server, run: _Run, msg: dict) -> None:
        p = msg["params"]
        t: Tool = run.tools[p["tool"]]
        try:
            a, kw = t.bind(p.get("args"))
            if t.is_async:
                out = await t.fn(*a, **kw)
            else:
                out = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: t.fn(*a, **kw))
            server.answer(msg["id"], {"result": out})
        except asyncio.CancelledError:
            server.answer(msg["id"], {"error": {"message": "cancelled", "code": "tool.failed"}})
            raise
        except Exception as e:  # noqa: BLE001
            server.answer(msg["id"], {"error": _error_of(e)})
        finally:
            run.calls.pop(msg["id"], None)

    def describe(self, tools: Any = None, mode: str = "auto") -> dict:
        """The script tool a model is given, with these tools in its description:
        {"name": "run_lua", "description": ..., "inputSchema": {code}}, from `tidepool
        describe --caller-tools` (mode auto: fitted to 2,048 characters, as for MCP
        clients; full; compact)."""
        decls = [t.declaration() for t in self._tools(tools).values()]
        argv = [self.binary, "describe", "--format", "json", "--describe", mode,
                "--caller-tools", "-"]
        if self.config:
            argv += ["--config", str(self.config)]
        if not self.builtin_tools:
            argv.append("--no-builtin-tools")
        p = subprocess.run(argv, input=json.dumps({"tools": decls}).encode(),
                           capture_output=True, timeout=30,
                           env=dict(self.env) if self.env is not None else None)
        if p.returncode != 0:
            raise TidepoolError(f"tidepool describe failed: "
                                f"{p.stderr.decode('utf-8', 'replace').strip()}", "describe")
        return json.loads(p.stdout)

    @staticmethod
    def model_view(envelope: Mapping) -> dict:
        """What a model reads of a run (see model_view())."""
        return model_view(envelope)
