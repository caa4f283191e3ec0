"""Tools from Python functions: a JSON Schema from type hints and the docstring.

The types a schema can be derived from: str, int, float, bool, None, list[...], tuple,
dict / dict[str, ...], Optional / X | None, Union, Literal, Enum, Any, and dataclasses and
TypedDicts (as a whole argument or nested). A parameter with a default is optional and
its default is in the schema.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import re
import types
import typing
from typing import Any, Callable

__all__ = ["tool", "Tool", "as_tool", "schema_of_type"]

_NoneType = type(None)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def schema_of_type(tp: Any, defs: dict | None = None, _seen: tuple = ()) -> dict:
    """The JSON Schema of a Python type (raises TypeError for one it cannot describe)."""
    if tp is Any or tp is inspect.Parameter.empty or tp is object:
        return {}
    if tp is _NoneType or tp is None:
        return {"type": "null"}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is list or tp is tuple or tp is set or tp is frozenset:
        return {"type": "array"}
    if tp is dict:
        return {"type": "object"}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = schema_of_type(args[0], defs, _seen)
        for extra in args[1:]:
            if isinstance(extra, str):
                inner = {**inner, "description": extra}
        return inner
    if origin is typing.Union or origin is types.UnionType:
        non_null = [a for a in args if a is not _NoneType]
        subs = [schema_of_type(a, defs, _seen) for a in non_null]
        nullable = len(non_null) < len(args)
        if len(subs) == 1 and not nullable:
            return subs[0]
        if nullable and len(subs) == 1 and set(subs[0]) == {"type"} and \
                isinstance(subs[0]["type"], str):
            return {"type": [subs[0]["type"], "null"]}
        if nullable:
            subs.append({"type": "null"})
        return {"anyOf": subs}
    if origin is typing.Literal:
        values = list(args)
        out: dict = {"enum": values}
        kinds = {_json_type(v) for v in values}
        if len(kinds) == 1:
            out["type"] = kinds.pop()
        return out
    if origin in (list, set, frozenset, collections.abc.Sequence, collections.abc.Set):
        return {"type": "array", "items": schema_of_type(args[0], defs, _seen)} if args \
            else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of_type(args[0], defs, _seen)}
        if args:
            return {"type": "array", "prefixItems": [schema_of_type(a, defs, _seen) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        return {"type": "array"}
    if origin is dict or origin is collections.abc.Mapping:
        out = {"type": "object"}
        if len(args) == 2:
            if args[0] is not str:
                raise TypeError(f"dict keys must be str in a tool's schema, got {args[0]!r}")
            out["additionalProperties"] = schema_of_type(args[1], defs, _seen)
        return out
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        out = {"enum": values}
        kinds = {_json_type(v) for v in values}
        if len(kinds) == 1:
            out["type"] = kinds.pop()
        return out
    if dataclasses.is_dataclass(tp) or _is_typeddict(tp):
        return _object_schema(tp, defs, _seen)
    raise TypeError(f"cannot describe the type {tp!r} as JSON Schema: give the tool an "
                    f"explicit input schema, or use str, int, float, bool, list, dict, "
                    f"Optional, Literal, a dataclass or a TypedDict")


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "object"


def _object_schema(tp: Any, defs: dict | None, seen: tuple) -> dict:
    """A dataclass or TypedDict; a recursive one goes through $defs."""
    name = tp.__name__
    if tp in seen:
        if defs is None:
            raise TypeError(f"{name} is recursive")
        return {"$ref": f"#/$defs/{name}"}
    hints = typing.get_type_hints(tp, include_extras=True)
    props: dict = {}
    required: list = []
    own_doc = inspect.cleandoc(tp.__dict__.get("__doc__") or "")
    docs = _param_docs(own_doc)
    if dataclasses.is_dataclass(tp):
        for f in dataclasses.fields(tp):
            s = dict(schema_of_type(hints.get(f.name, Any), defs, seen + (tp,)))
            if f.name in docs:
                s.setdefault("description", docs[f.name])
            if f.default is not dataclasses.MISSING:
                if _jsonable(f.default):
                    s["default"] = f.default
            elif f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                required.append(f.name)
            props[f.name] = s
    else:
        req_keys = getattr(tp, "__required_keys__", frozenset(hints))
        for k, h in hints.items():
            s = dict(schema_of_type(h, defs, seen + (tp,)))
            if k in docs:
                s.setdefault("description", docs[k])
            props[k] = s
            if k in req_keys:
                required.append(k)
    out: dict = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    desc = _summary(own_doc)
    if desc and not (dataclasses.is_dataclass(tp) and desc.startswith(name + "(")):
        out["description"] = desc
    if defs is not None and _refers_to(out, name):
        defs[name] = out
        return {"$ref": f"#/$defs/{name}"}
    return out


def _refers_to(schema: Any, name: str) -> bool:
    if isinstance(schema, dict):
        if schema.get("$ref") == f"#/$defs/{name}":
            return True
        return any(_refers_to(v, name) for v in schema.values())
    if isinstance(schema, list):
        return any(_refers_to(v, name) for v in schema)
    return False


def _jsonable(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool)) or (
        isinstance(v, (list, tuple)) and all(_jsonable(x) for x in v)) or (
        isinstance(v, dict) and all(isinstance(k, str) and _jsonable(x) for k, x in v.items()))


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Returns?|Raises|Yields|"
                      r"Examples?|Notes?)\s*:?\s*$")


def _summary(doc: str) -> str:
    """The docstring up to its first section (Args:, Returns:, :param ...)."""
    out = []
    for line in doc.splitlines():
        if _SECTION.match(line) or line.strip().startswith(":param") or \
                re.match(r"^\s*-{3,}\s*$", line):
            break
        out.append(line)
    while out and out[-1].strip() == "":
        out.pop()
    # numpy style: a "Parameters" line followed by dashes
    if len(out) >= 1 and out[-1].strip() in ("Parameters", "Returns"):
        out.pop()
    return "\n".join(out).strip()


def _param_docs(doc: str) -> dict:
    """Parameter descriptions: Google style (Args: name (type): text), Sphinx
    (:param name: text) and numpy (name : type / indented text)."""
    docs: dict = {}
    for m in re.finditer(r":param\s+(?:[^:\s]+\s+)?(\w+)\s*:\s*(.+)", doc):
        docs[m.group(1)] = m.group(2).strip()
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        if re.match(r"^\s*(Args|Arguments|Parameters|Params|Attributes)\s*:\s*$", lines[i]):
            indent = None
            i += 1
            cur = None
            while i < len(lines):
                line = lines[i]
                if not line.strip():
                    i += 1
                    continue
                ind = len(line) - len(line.lstrip())
                if indent is None:
                    indent = ind
                if ind < indent or _SECTION.match(line):
                    break
                m = re.match(r"^\s*(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", line)
                if ind == indent and m:
                    cur = m.group(1)
                    docs[cur] = m.group(3).strip()
                elif cur:
                    docs[cur] = (docs[cur] + " " + line.strip()).strip()
                i += 1
            continue
        i += 1
    return docs


class Tool:
    """A caller tool: a name, a description, schemas and the function (plain or async)."""

    def __init__(self, fn: Callable, name: str | None = None, description: str | None = None,
                 input_schema: dict | None = None, output_schema: dict | None = None,
                 timeout_ms: int | None = None):
        if not callable(fn):
            raise TypeError(f"a tool must be a function, got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or "tool"
        doc = inspect.getdoc(fn) or ""
        self.description = description if description is not None else _summary(doc)
        self.is_async = inspect.iscoroutinefunction(fn) or \
            inspect.iscoroutinefunction(getattr(fn, "__call__", None))
        self._whole: Any = None  # the dataclass / TypedDict the one argument is
        if input_schema is not None:
            self.input_schema = input_schema
        else:
            self.input_schema = self._derive(fn, doc)
        self.output_schema = output_schema
        self.timeout_ms = timeout_ms

    def _derive(self, fn: Callable, doc: str) -> dict:
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as e:  # an unresolvable annotation
            raise TypeError(f"tool {self.name}: cannot read its type hints ({e}); give "
                            f"input_schema explicitly") from e
        params = [p for p in sig.parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        defs: dict = {}
        if len(params) == 1:
            tp = hints.get(params[0].name)
            if tp is not None and (dataclasses.is_dataclass(tp) or _is_typeddict(tp)):
                self._whole = tp
                s = _object_schema(tp, defs, ())
                if "$ref" in s:
                    s = dict(defs[tp.__name__])
                if defs:
                    s["$defs"] = defs
                return s
        docs = _param_docs(doc)
        props: dict = {}
        required: list = []
        for p in params:
            if p.kind is p.POSITIONAL_ONLY:
                raise TypeError(f"tool {self.name}: parameter {p.name} is positional-only; a "
                                f"tool is called with named arguments")
            s = dict(schema_of_type(hints.get(p.name, Any), defs))
            if p.name in docs:
                s.setdefault("description", docs[p.name])
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
            elif _jsonable(p.default):
                s["default"] = list(p.default) if isinstance(p.default, tuple) else p.default
            props[p.name] = s
        out: dict = {"type": "object", "properties": props}
        if required:
            out["required"] = required
        if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            out["additionalProperties"] = False
        if defs:
            out["$defs"] = defs
        return out

    def declaration(self) -> dict:
        d: dict = {"name": self.name, "inputSchema": self.input_schema}
        if self.description:
            d["description"] = self.description
        if self.output_schema is not None:
            d["outputSchema"] = self.output_schema
        if self.timeout_ms:
            d["timeoutMs"] = int(self.timeout_ms)
        return d

    def bind(self, args: Any) -> tuple[tuple, dict]:
        """The call's arguments: fn(**args), or fn(Whole(**args)) for a dataclass or
        TypedDict argument."""
        if self._whole is not None:
            return (_build(self._whole, args),), {}
        if not isinstance(args, dict):
            return (args,), {}
        return (), args

    def __call__(self, *a, **kw):
        return self.fn(*a, **kw)

    def __repr__(self) -> str:
        return f"<tidepool tool {self.name}>"


def _build(tp: Any, value: Any) -> Any:
    """A dataclass instance from JSON (nested dataclasses too); TypedDicts stay dicts."""
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        hints = typing.get_type_hints(tp)
        kw = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kw[f.name] = _build_value(hints.get(f.name, Any), value[f.name])
        return tp(**kw)
    return value


def _build_value(tp: Any, value: Any) -> Any:
    if dataclasses.is_dataclass(tp):
        return _build(tp, value)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list,) and args and isinstance(value, list):
        return [_build_value(args[0], v) for v in value]
    if origin is typing.Union or origin is types.UnionType:
        for a in args:
            if dataclasses.is_dataclass(a) and isinstance(value, dict):
                return _build(a, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            return value
    return value


def tool(fn: Callable | None = None, *, name: str | None = None,
         description: str | None = None, input_schema: dict | None = None,
         output_schema: dict | None = None, timeout_ms: int | None = None):
    """Makes a function a tool: @tool, or @tool(name=..., description=..., input_schema=...).
    Its schema comes from its type hints and docstring unless input_schema is given."""
    def wrap(f: Callable) -> Tool:
        return Tool(f, name=name, description=description, input_schema=input_schema,
                    output_schema=output_schema, timeout_ms=timeout_ms)
    if fn is not None:
        return wrap(fn)
    return wrap


def as_tool(name: str | None, value: Any) -> Tool:
    """A tools= entry as a Tool: a Tool, a function, or a dict {fn|function, description,
    input_schema, output_schema}."""
    if isinstance(value, Tool):
        if name and name != value.name:
            t = Tool.__new__(Tool)
            t.__dict__.update(value.__dict__)
            t.name = name
            return t
        return value
    if isinstance(value, dict):
        fn = value.get("fn") or value.get("function") or value.get("execute")
        return Tool(fn, name=name or value.get("name"), description=value.get("description"),
                    input_schema=value.get("input_schema") or value.get("inputSchema"),
                    output_schema=value.get("output_schema") or value.get("outputSchema"),
                    timeout_ms=value.get("timeout_ms"))
    if callable(value):
        return Tool(value, name=name)
    raise TypeError(f"tool {name!r}: expected a function or a tidepool.Tool, got {value!r}")
