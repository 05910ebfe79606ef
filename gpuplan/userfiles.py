"""Reading the text files a user hands gpuplan: workloads, items, plans, profiles, playbooks,
prices, config and inventories.

Every way such a file can be unusable (missing, a directory, a named pipe, unreadable, binary,
too large) becomes one UsageError line that names the file and says what to do; nothing else is
raised. load_yaml and load_json refuse what a hostile file could do to a plain parser (aliases,
deep nesting, duplicate keys, non-finite or endless numbers).
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

from gpuplan.errors import UsageError

MAX_BYTES = 16 * 2**20  # far above any hand-written file; stops a wrong path (a video, a disk image) early


MAX_DEPTH = 64  # nesting of lists and mappings; hand-written files use a handful
MAX_DIGITS = 30  # an integer longer than this is a typo (or an attack), never a count or a price
# control characters, and the ones that reorder or break a line as shown: bidirectional
# overrides, isolates and marks (a name can read as another), line and paragraph separators
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def printable(text: str) -> str:
    """`text` with control characters (newlines, terminal escape codes) shown as \\xNN escapes:
    what gpuplan prints of a name, path or region a user gave is one line and cannot drive the
    terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


def one_line(text: str) -> str:
    """Free text from a user's file (a note, a source) as one printable line: runs of whitespace,
    newlines included, become one space and any other control character an \\xNN escape."""
    return printable(" ".join(text.split()))


def check_plain(value: str, what: str) -> str:
    """Refuse a name, path or region holding a control character (a newline makes a two-line
    message, an escape code drives the terminal)."""
    if _CONTROL.search(value):
        raise UsageError(f"{what} {printable(value)!r} contains a control character; type it again without one")
    return value


def expand(path: str | os.PathLike, what: str = "path") -> Path:
    """`path` with a leading ~ or ~user expanded; a user that does not exist is a UsageError
    (Path.expanduser raises RuntimeError), and so is a control character."""
    check_plain(os.fspath(path), what)
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise UsageError(f"{what} {os.fspath(path)}: no such user's home folder; give the full path") from None


def check_writable(path: str | os.PathLike, what: str, *, folder: bool) -> None:
    """Refuse, before any work or network, an output `path` (a file, or a `folder`) that cannot be
    written: a folder where a file goes (or the other way round), a file on the way, no write
    permission. It is not created here: a refused command writes nothing."""
    p = Path(expand(path, what)).absolute()
    if p.exists() and p.is_dir() != folder:
        raise UsageError(f"{what} {p} is {'a file' if folder else 'a directory'}; give {'a folder' if folder else 'a file'}"
                         " path")
    above = p if p.exists() else p.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise UsageError(f"{what} {p}: {above} is a file, so it cannot be written there; give another path")
    if not os.access(above, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {p}: {above} is not writable; give another path")


def read_text(path: str | os.PathLike, what: str, fix: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of `path` (a leading byte-order mark dropped). `what` names the file in
    messages ("items file"); `fix` says what to do about it ("write one item per line"). Only a
    regular file is read: a named pipe or a device would block the read forever."""
    p = expand(path, what)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UsageError(f"{what} {p} not found; {fix}") from None
    except OSError as exc:
        raise UsageError(f"{what} {p}: cannot read it ({exc.strerror or exc}); {fix}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise UsageError(f"{what} {p} is a directory, not a file; {fix}")
        raise UsageError(f"{what} {p} is not a regular file (a named pipe, a device or a socket); {fix}")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise UsageError(f"{what} {p}: cannot read it ({exc.strerror or exc}); {fix}") from None
    if len(data) > max_bytes:
        raise UsageError(f"{what} {p} is larger than {_size(max_bytes)}, the most gpuplan reads for it; {fix}")
    if b"\0" in data:
        raise UsageError(f"{what} {p} is not a text file (it contains NUL bytes); {fix}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {p} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); {fix}") from None


def load_yaml(text: str):
    """YAML text as plain data (safe: no Python objects), parsed by libyaml's C parser where
    PyYAML was built with it (about 10x faster on a 20,000-job workload), else by PyYAML's own.

    Stricter than yaml.safe_load: its events are read first (libyaml's parser keeps its own
    stack, so 100 KB of `[` cannot overflow the C stack as composing them would), refusing
    aliases (a 364-byte file can expand past 4 GB) and nesting deeper than MAX_DEPTH; then
    duplicate keys, non-finite numbers and integers past MAX_DIGITS digits are refused. Raises
    yaml.YAMLError (yaml.MarkedYAMLError with a `problem` for these refusals)."""
    import yaml

    loader = _strict_loader()
    try:
        events = list(yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
        _check_events(events)
    except yaml.MarkedYAMLError as exc:
        # the libyaml in PyYAML 6.0.4 wheels has its own nesting limit, met while it scans ahead for a
        # key, before our depth count sees the events: one message whichever limit is met first.
        if "maximum nesting depth" in str(exc.problem):
            raise yaml.MarkedYAMLError(problem=f"nested more than {MAX_DEPTH} levels deep",
                                       problem_mark=exc.problem_mark) from None
        raise
    built = _from_events(events, loader)
    return yaml.load(text, Loader=loader) if built is _UNUSUAL else built


_UNUSUAL = object()  # what _from_events returns for a document it leaves to the full loader


def _from_events(events: list, loader):
    """The data of a plain document, built from the parser's events already read and checked, as
    `yaml.load(text, Loader=loader)` builds it, without parsing the text a second time nor
    composing its nodes: a 20,000-job workload is read in a third of the time (issue 47). The
    same values (each scalar resolved and constructed by the loader's own resolver and
    constructors), the same refusals in the same order (PyYAML constructs a mapping's keys,
    then its scalar values, its nested mappings and lists one level after another).
    _UNUSUAL for anything else (several documents, an explicit tag, a merge key, a key that is
    not a scalar): the full loader reads those."""
    constructing = loader("")  # its resolver and constructors (scalars use none of its state)
    constructors = loader.yaml_constructors
    try:
        return _built(events, constructing, constructors)
    finally:
        constructing.dispose()


def _built(events: list, constructing, constructors: dict):
    import yaml
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    documents = 0
    tags: dict = {}  # (text, implicit) -> its tag, resolved once
    stack: list[list] = []  # open collections: [node kind, start mark, children]
    root = None
    for event in events:
        kind = type(event)
        if kind is yaml.ScalarEvent:
            if event.tag not in (None, "!"):
                return _UNUSUAL
            tag = tags.get((event.value, event.implicit))
            if tag is None:
                tag = tags[event.value, event.implicit] = constructing.resolve(ScalarNode, event.value, event.implicit)
            if tag not in constructors or tag in ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"):
                return _UNUSUAL
            node: object = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            if event.tag not in (None, "!"):
                return _UNUSUAL
            stack.append([MappingNode if kind is yaml.MappingStartEvent else SequenceNode, event.start_mark, []])
            continue
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            node = tuple(stack.pop())
        elif kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > 1:
                return _UNUSUAL
            continue
        else:  # stream start and end, document end
            continue
        if stack:
            stack[-1][2].append(node)
        else:
            root = node
    if root is None:
        return None
    known: dict = {}  # (tag, text) -> its value: a workload's keys recur on every job

    def scalar(node):
        key = (node.tag, node.value)
        value = known.get(key, known)
        if value is known:  # immutable values (text, numbers, dates): one object serves every alike scalar
            value = known[key] = constructors[node.tag](constructing, node)
        return value

    def made(node, later: list):
        if type(node) is ScalarNode:
            return scalar(node)
        data: dict | list = {} if node[0] is MappingNode else []
        later.append((data, node))
        return data

    later: list = []
    data = made(root, later)
    while later:
        level, later = later, []
        for into, (kind, _, children) in level:
            if kind is SequenceNode:
                into.extend(made(child, later) for child in children)
                continue
            keys, seen = [], set()
            for key_node in children[::2]:
                if type(key_node) is not ScalarNode:
                    return _UNUSUAL
                key = scalar(key_node)
                if key in seen:
                    from yaml.constructor import ConstructorError

                    raise ConstructorError(None, None, f"duplicate key {printable(str(key))!r}", key_node.start_mark)
                seen.add(key)
                keys.append(key)
            for key, value_node in zip(keys, children[1::2]):
                into[key] = made(value_node, later)
    return data


def read_yaml(path: str | os.PathLike, what: str, fix: str):
    """A user's YAML file as plain data ({} when empty): read_text's checks, then load_yaml's;
    anything wrong is one line naming the file and saying to fix it."""
    import yaml

    try:
        return load_yaml(read_text(path, what, fix)) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML ({yaml_problem(exc)}); fix the file") from None


def _check_events(events):
    """Refuse an alias or nesting deeper than MAX_DEPTH among parser events."""
    import yaml

    depth = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            raise yaml.MarkedYAMLError(problem=f"alias *{event.anchor} (aliases are not accepted; write the value out)",
                                       problem_mark=event.start_mark)
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(problem=f"nested more than {MAX_DEPTH} levels deep",
                                           problem_mark=event.start_mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def yaml_problem(exc) -> str:
    """What is wrong, in words, from a yaml.YAMLError: its problem and line where it has them."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    return f"{problem}, line {mark.line + 1}" if mark is not None else problem


_LOADER = None


def _strict_loader():
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml
    from yaml.constructor import ConstructorError

    class Strict(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the plain constructor says so
                    break
                if duplicate:
                    raise ConstructorError(None, None, f"duplicate key {printable(str(key))!r}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node):
            digits = sum(c.isdigit() for c in str(node.value))
            if digits > MAX_DIGITS:
                raise ConstructorError(None, None, f"a number of {digits} digits (at most {MAX_DIGITS})",
                                       node.start_mark)
            return super().construct_yaml_int(node)

        def construct_yaml_timestamp(self, node):
            try:
                return super().construct_yaml_timestamp(node)
            except ValueError as exc:  # 2026-13-45: the shape of a date, not a date
                raise ConstructorError(None, None, f"{printable(str(node.value))!r} is not a valid date ({exc})",
                                       node.start_mark) from None

        def construct_yaml_float(self, node):
            value = super().construct_yaml_float(node)
            if not math.isfinite(value):
                raise ConstructorError(None, None, f"{printable(str(node.value))!r} is not a finite number",
                                       node.start_mark)
            return value

    Strict.add_constructor("tag:yaml.org,2002:int", Strict.construct_yaml_int)
    Strict.add_constructor("tag:yaml.org,2002:float", Strict.construct_yaml_float)
    Strict.add_constructor("tag:yaml.org,2002:timestamp", Strict.construct_yaml_timestamp)
    # YAML 1.2's core schema for plain scalars, not PyYAML's 1.1 one: `1:30` is not 5400 (base 60),
    # `0x10` and `0o10` not 16 and 8, `1_000` not 1000, `yes` / `no` / `on` / `off` not booleans;
    # they stay text, and the field that wanted a number or a boolean says so
    import re

    implicit = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    Strict.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in pairs if tag not in implicit]
                                      for first, pairs in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Strict.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))
    Strict.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
    Strict.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+.0123456789"))
    _LOADER = Strict
    return Strict


class _Refused:
    """A value load_json refuses, kept until the key it belongs to is known (for the message)."""

    def __init__(self, why: str) -> None:
        self.why = why


def load_json(text: str):
    """JSON text as plain data, refusing what json.loads lets through: nesting deeper than
    MAX_DEPTH (checked before parsing), duplicate keys (json.loads keeps the last), NaN and
    Infinity, integers past MAX_DIGITS digits. Raises json.JSONDecodeError, its `msg` saying
    why (naming the key where there is one)."""
    import json

    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    depth = 0
    for m in re.finditer(r"[\[\]{}]", without_strings):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise json.JSONDecodeError(f"nested more than {MAX_DEPTH} levels deep", text, m.start())

    def pairs(items):
        out: dict = {}
        for k, v in items:
            if k in out:
                raise json.JSONDecodeError(f"duplicate key {printable(k)!r}", text, 0)
            _no_refused(v, text, printable(k))
            out[k] = v
        return out

    def integer(digits: str):
        n = len(digits.lstrip("-"))
        return _Refused(f"has {n} digits (at most {MAX_DIGITS})") if n > MAX_DIGITS else int(digits)

    def number(literal: str):
        value = float(literal)
        return value if math.isfinite(value) else _Refused(f"is {literal}, not a finite number")

    data = json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=number,
                      parse_constant=lambda name: _Refused(f"is {name.lower()}, not a finite number"))
    _no_refused(data, text, "a value")
    return data


def _no_refused(data, text: str, where: str) -> None:
    """Raise for a refused value, itself or in a list (objects check their own values)."""
    import json

    if isinstance(data, _Refused):
        raise json.JSONDecodeError(f"{where} {data.why}", text, 0)
    if isinstance(data, list):
        for item in data:
            _no_refused(item, text, where)


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n // 2**10} KiB"


# an environment variable's name as shells take it: env:, --env, --env-file, secret_env, task files
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def read_env_file(path: str | os.PathLike) -> dict[str, str]:
    """An --env-file: KEY=VALUE a line (`export ` before it allowed; blank lines and # comments
    skipped; a value in matching single or double quotes has them taken off). Every bad line is
    refused at once, with its line number (errors.Mistakes)."""
    from gpuplan.errors import Mistakes

    text = read_text(path, "env file", "write KEY=VALUE, one a line")
    values: dict[str, str] = {}
    bad: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        key = key.strip()
        if not sep or not ENV_NAME.match(key):
            bad.append(f"line {n}: {one_line(line)[:40]!r} is not KEY=VALUE (a variable name, =, its value)")
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    if bad:
        raise Mistakes(f"env file {path}", bad)
    return values
