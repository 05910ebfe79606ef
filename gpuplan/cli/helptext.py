"""Help that reads as written: what a value looks like instead of Python types, no markup eaten,
whole sentences, and the choices of an option listed and completed.

Applied once to the click command tree typer builds (`readable(command)`), so every option of
every command gets the same treatment without each declaration repeating it:

- a flag shows no value; an option shows its metavar (`--deadline DURATION`), else a word for
  its type (N for numbers, FILE for paths, TEXT otherwise); an argument shows its name in capitals;
- an option whose metavar lists its choices (`table|json|csv`) completes them in the shell;
- help and docstrings are escaped for rich (`gpuplan[plot]` is not a markup tag) and a single
  line break inside a paragraph becomes a space.
"""

from __future__ import annotations

import re
from typing import Any

_CHOICES = re.compile(r"^[a-z0-9-]+(\|[a-z0-9-]+)+$")
# What rich would read as a style tag ("[plot]", "[/b]"): a backslash before it keeps it text.
# Done here rather than with rich.markup.escape so that starting a command does not import rich.
_MARKUP_TAG = re.compile(r"(\[[a-zA-Z#/@][^\[\]]*\])")


def choices(metavar: str | None) -> list[str]:
    """The choices a metavar like `cost|time` lists, else none."""
    return metavar.split("|") if metavar and _CHOICES.match(metavar) else []


def _sentences(text: str | None) -> str | None:
    """Paragraphs kept, the line breaks inside one joined, markup escaped."""
    if not text:
        return text
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return _MARKUP_TAG.sub(r"\\\1", "\n\n".join(p for p in paragraphs if p))


def _type_word(param: Any) -> str:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    name = getattr(annotation, "__name__", str(annotation))
    if name in ("int", "float", "Decimal"):
        return "N"
    if "Path" in name:
        return "FILE"
    return "TEXT"


def _complete(values: list[str]):
    def complete(ctx, param, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        return [CompletionItem(v) for v in values if v.startswith(incomplete)]

    return complete


def _fix_param(param: Any) -> None:
    if param.param_type_name == "argument":
        label = param.metavar or param.name.upper()
        param.metavar = label
        param.display_type_rich = lambda ctx: None  # the name column already says it
    elif getattr(param, "is_flag", False):
        param.display_type_rich = lambda ctx: None
    else:
        label = param.metavar or _type_word(param)
        param.metavar = label
        param.display_type_rich = lambda ctx, label=label: label
        listed = choices(label)
        if listed and getattr(param, "_custom_shell_complete", None) is None:
            param._custom_shell_complete = _complete(listed)
    if getattr(param, "help", None):
        param.help = _sentences(param.help)


# Lists a help text names by placeholder, made from the registries (the entry points
# gpuplan.providers and gpuplan.run_backends, the refresh sources) when that help is shown or
# docs/cli.md is written, never when a command starts: reading the entry points costs ~0.1 s.
_NOTES = {"baremetal": "your own hosts", "slurm": "a cluster of slurm.yaml, docs/slurm.md"}
_LIST = re.compile(r"\{(providers|infra|refreshable)\}")


def lists() -> dict[str, str]:
    """Each placeholder's text: `{providers}` the catalog's providers, `{infra}` what `--infra`
    takes (a provider's other names after `=`), `{refreshable}` what `catalog refresh` reads."""
    from gpuplan.market.catalog_refresh import PROVIDERS
    from gpuplan.run.launcher import infra_names

    names = infra_names()

    def noted(name: str) -> str:
        return f"{name} ({_NOTES[name]})" if name in _NOTES else name

    infra = [noted(n) if not also else f"{n} (= {', '.join(also)})" for n, also in names]
    return {"providers": ", ".join(noted(n) for n, _ in names),
            "infra": ", ".join(infra),
            "refreshable": ", ".join(PROVIDERS)}


def fill_lists(command: Any) -> Any:
    """Every placeholder in the help of `command` and the commands below it replaced by its list."""
    made: dict[str, str] = {}

    def fill(text: str) -> str:
        if not made:
            made.update(lists())
        return _LIST.sub(lambda m: made[m.group(1)], text)

    for param in command.params:
        if getattr(param, "help", None) and _LIST.search(param.help):
            param.help = fill(param.help)
    for sub in getattr(command, "commands", {}).values():
        fill_lists(sub)
    return command


def readable(command: Any) -> Any:
    """Fix every command's and parameter's help in place; returns the command."""
    for attr in ("help", "short_help"):
        if getattr(command, attr, None):
            setattr(command, attr, _sentences(getattr(command, attr)))
    for param in command.params:
        _fix_param(param)
    if any(_LIST.search(getattr(p, "help", None) or "") for p in command.params):
        shown = command.format_help

        def format_help(ctx, formatter):  # the lists made only when this help is shown
            fill_lists(command)
            return shown(ctx, formatter)

        command.format_help = format_help
    own = command.get_help_option

    def help_option(ctx):
        option = own(ctx)
        if option is not None:
            option.display_type_rich = lambda ctx: None
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        readable(sub)
    return command
