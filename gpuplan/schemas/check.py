"""The shipped JSON Schemas used at run time: every mistake of a user's file in one pass, each as
"PATH: what is wrong; what is allowed".

Only the keywords gpuplan's own schemas use are understood (type, enum, const, properties,
additionalProperties, required, dependentRequired, propertyNames, items, contains,
minItems/maxItems, minLength, pattern, minimum/maximum/exclusiveMinimum, oneOf, anyOf); a schema
using another fails tests/test_schemas.py, not a user's run. No third-party validator: reading a
batch file or an inventory stays as fast to start as `--help`.
"""

from __future__ import annotations

import json
import re
from datetime import date
from functools import cache
from typing import Any

from gpuplan.schemas import path
from gpuplan.userfiles import printable

_TYPES = {"string": "text", "integer": "a whole number", "number": "a number", "boolean": "true or false",
          "object": "a mapping", "array": "a list", "null": "nothing"}
KNOWN = frozenset({"$schema", "$id", "title", "description", "type", "enum", "const", "properties",
                   "additionalProperties", "required", "dependentRequired", "propertyNames", "items", "contains",
                   "minItems", "maxItems", "minLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "oneOf",
                   "anyOf", "default", "examples", "$comment", "x-refusal"})


@cache
def schema(name: str) -> dict:
    """The shipped schema of `name` (gpuplan.schemas.NAMES, or "config")."""
    return json.loads(path(name).read_text())


def problems(data: Any, name_or_schema: str | dict, at: str = "") -> list[str]:
    """Every way `data` breaks the schema, as "PATH: problem" lines (PATH like hosts[2].gpus.count;
    the top level is `at`); [] when it fits."""
    sch = schema(name_or_schema) if isinstance(name_or_schema, str) else name_or_schema
    out: list[str] = []
    _check(data, sch, at, out)
    return out


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string" and isinstance(value, date):  # YAML reads 2026-11-01 as a date: text in the file
        return True
    return isinstance(value, {"string": str, "boolean": bool, "object": dict, "array": list,
                              "null": type(None)}[kind])


def _show(value: Any) -> str:
    text = printable(repr(value))
    return text if len(text) <= 40 else text[:37] + "..."


def _or(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _where(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _check(value: Any, sch: dict, at: str, out: list[str]) -> None:
    label = at or "the file"
    kinds = sch.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            wanted = _or([_TYPES[k] for k in kinds])
            out.append(f"{label}: empty; give {wanted} or leave the field out" if value is None else
                       f"{label} {_show(value)}: {wanted}")
            return
    if "const" in sch and value != sch["const"]:
        out.append(f"{label}: {_show(value)}; use {sch['const']!r}")
    if "enum" in sch and value not in sch["enum"]:
        out.append(f"{label} {_show(value)}: use {_or([str(e) for e in sch['enum']])}")
        return
    for key in ("oneOf", "anyOf"):
        if key in sch:
            branches = [problems(value, b, at) for b in sch[key]]
            if not any(not b for b in branches):
                # the branch whose type fits says what is wrong; none fits: the types allowed
                typed = [b for b, s in zip(branches, sch[key], strict=True) if "type" not in s or any(
                    _is(value, k) for k in ([s["type"]] if isinstance(s["type"], str) else s["type"]))]
                if typed:
                    out.extend(typed[0])
                elif sch.get("x-refusal"):
                    out.append(f"{label} {sch['x-refusal']}")
                else:
                    allowed = [_TYPES[k] for s in sch[key] for k in
                               ([s["type"]] if isinstance(s.get("type"), str) else s.get("type", []))]
                    out.append(f"{label} {_show(value)}: {_or(list(dict.fromkeys(allowed)))}")
    if isinstance(value, str):
        if len(value) < sch.get("minLength", 0):
            out.append(f"{label}: empty; give a value or leave the field out")
        elif "pattern" in sch and not re.search(sch["pattern"], value):
            why = sch.get("x-refusal") or f"does not match {sch['pattern']}" + (
                f" ({sch['description']})" if sch.get("description") else "")
            out.append(f"{label} {_show(value)} {why}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high, above = sch.get("minimum"), sch.get("maximum"), sch.get("exclusiveMinimum")
        if (low is not None and value < low) or (high is not None and value > high) or (
                above is not None and value <= above):
            lo = f"above {above}" if above is not None else f"from {low}" if low is not None else ""
            hi = f"to {high:,}" if high is not None else ""
            out.append(f"{label}: {_show(value)} is out of range; use a number {' '.join(p for p in (lo, hi) if p)}")
    if isinstance(value, list):
        if len(value) < sch.get("minItems", 0) or len(value) > sch.get("maxItems", len(value)):
            n = sch.get("minItems"), sch.get("maxItems")
            out.append(f"{label}: {len(value)} entries; give {n[0] if n[0] == n[1] else f'{n[0] or 0} to {n[1]}'}"
                       if n[1] is not None else f"{label}: give at least {n[0]} entries")
        if isinstance(sch.get("items"), dict):
            for i, item in enumerate(value):
                _check(item, sch["items"], f"{at}[{i}]", out)
        if "contains" in sch and not any(not problems(v, sch["contains"]) for v in value):
            out.append(f"{label} {_show(value)} " + (sch.get("x-refusal") or
                       f"no entry matches {sch['contains'].get('pattern', 'what is required')}"))
    if isinstance(value, dict):
        props = sch.get("properties", {})
        for key in sch.get("required", []):
            if key not in value:
                out.append(f"{at + ': ' if at else ''}{key} is missing")
        for key, needs in sch.get("dependentRequired", {}).items():
            if key in value:
                out.extend(f"{label}: give both {key} and {n}" for n in needs if n not in value)
        extra = sch.get("additionalProperties", True)
        names = sch.get("propertyNames")
        for key, item in value.items():
            where = _where(at, str(key))
            if names is not None and problems(str(key), names):
                out.append(f"{label}: {_show(str(key))} " + (names.get("x-refusal") or "is not an allowed name"
                           + (f" (must match {names['pattern']})" if "pattern" in names else "")))
                continue
            if key in props:
                _check(item, props[key], where, out)
            elif extra is False:
                fields = ", ".join(sorted(props)) or "none"
                prefix = f"{at}: " if at else ""
                out.append(f"{prefix}unknown field {printable(str(key))!r}; the fields{' here' if at else ''} are {fields}")
            elif isinstance(extra, dict):
                _check(item, extra, where, out)
