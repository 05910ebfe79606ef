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
    core._TyperParameter.get_runtime_param = _runtime_param
