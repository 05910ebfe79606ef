"""Options parsed without pydantic where the answer is certain (issue 47: start-up).

typer 0.29 coerces every option's value through a pydantic TypeAdapter, so parsing the
arguments of `gpuplan status` imported pydantic (about 0.1 s of a 0.4 s command). Here a text
option given text, and a whole-number option given plain digits, are answered as that adapter
answers them (the same value); any other value or kind of option (paths, choices, ranges,
lists, parsers) goes to typer's own coercion, its checks and wording unchanged. typer is pinned
in pyproject.toml to the version this was written against and tested with (tests/test_cli_startup.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from typer import core
from typer._coercion import RuntimeParam, build_runtime_param

_WHOLE = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")  # no sign, space, underscore or leading zero: int() is pydantic's answer


@dataclass(frozen=True)
class _Plain(RuntimeParam):
    """Any option: the certain cases here, the rest by typer's adapter (built only then). A value
    not given (None) never gets here: RuntimeParam.coerce answers it."""

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        d = param.type_descriptor
        plain = d.file_annotation is None and d.parameter_info.parser is None and not (d.is_path or d.is_choice
                                                                                          or d.is_ranged)
        kind = self.annotation
        if plain and kind is bool and type(value) is bool:
            return value
        if plain and kind is str and type(value) is str:
            return value
        if plain and kind is int and (type(value) is int or (type(value) is str and _WHOLE.match(value))):
            return int(value)
        if plain and kind == list[str] and isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
            return list(value)
        return build_runtime_param(d)._coerce_value(value, param=param, ctx=ctx)


def _runtime_param(self):
    if self._runtime_param is None:
        d = self.type_descriptor
        self._runtime_param = _Plain(parameter_info=d.parameter_info, annotation=d.annotation)
    return self._runtime_param


def install() -> None:
    core._TyperParameter.get_runtime_param = _runtime_param  # type: ignore[method-assign]  # typer is pinned


# --- help without rich's Markdown and Traceback ----------------------------------------------
# typer.rich_utils, imported to print --help, imports rich.markdown (markdown_it) and
# rich.traceback (rich.pretty, attr): about 0.1 s of `gpuplan --help`, for help in markdown mode
# (gpuplan's is not) and for tracebacks (gpuplan prints none without --debug). While it is
# imported they are stand-ins that import the real class when first used; then the real modules
# are back for anyone else.

_LATER = (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback"))


class _Later(type):
    """A class standing in for a rich class until it is used: calling it or reading an
    attribute (Traceback.from_exception) imports the real one."""

    def __getattr__(cls, item: str):
        return getattr(cls._real(), item)


def _later(module: str, name: str) -> type:
    import importlib

    def real():
        return getattr(importlib.import_module(module), name)

    def new(cls, *args, **kwargs):
        return real()(*args, **kwargs)

    return _Later(name, (), {"__new__": new, "_real": staticmethod(real)})


class _LightHelp:
    """A meta path finder that imports typer.rich_utils with _LATER standing in."""

    def find_spec(self, name, path, target=None):
        if name != "typer.rich_utils":
            return None
        import importlib.util
        import sys
        import types

        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader

        class Loader:
            def create_module(self, spec):
                return real.create_module(spec)

            def exec_module(self, module):
                stood_in = {}
                for mod, cls in _LATER:
                    if mod not in sys.modules:
                        stub = types.ModuleType(mod)
                        setattr(stub, cls, _later(mod, cls))
                        sys.modules[mod] = stood_in[mod] = stub
                try:
                    real.exec_module(module)
                finally:
                    for mod, stub in stood_in.items():
                        if sys.modules.get(mod) is stub:
                            del sys.modules[mod]

        spec.loader = Loader()
        return spec


def light_help() -> None:
    import sys

    if not any(isinstance(f, _LightHelp) for f in sys.meta_path):
        sys.meta_path.insert(0, _LightHelp())
