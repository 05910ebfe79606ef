"""A batch's command as the shell text each item runs, the same on every backend (Ray, Slurm,
DOK, in a container or not), so `command: python colorize.py {item} --out $GPUPLAN_OUTPUT_DIR`
means one thing wherever it runs.

The words of the command become one line for a POSIX shell on the node (sh, dash, bash,
busybox), where every item's process has GPUPLAN_ITEM (the item's text) and GPUPLAN_OUTPUT_DIR
(its output folder) in its environment, beside the batch's `env:`:
- `{item}` is "$GPUPLAN_ITEM" and `{out}` "$GPUPLAN_OUTPUT_DIR": the item reaches the program
  as one word, whatever it holds (spaces, quotes, `$(...)`, globs): an item is data, never
  shell text;
- `$NAME` and `${NAME}` are the node's variable, as a shell expands it inside double quotes
  (one word, never split or globbed; empty where unset);
- everything else is taken literally (single-quoted).
The script of a shell the command starts (`sh -c SCRIPT`, `bash -lc SCRIPT`) is that shell's
own text: its `$NAME` is left to it (a loop's `$f` stays `$f`), and `{item}` and `{out}` in it
become "$GPUPLAN_ITEM" and "$GPUPLAN_OUTPUT_DIR" there too (quoted for where they stand), so
the script's shell never reads an item as code.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

ITEM_VAR = "GPUPLAN_ITEM"
OUT_VAR = "GPUPLAN_OUTPUT_DIR"
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh"})
_PIECE = re.compile(r"\{item\}|\{out\}|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_WORDS = {"{item}": f'"${ITEM_VAR}"', "{out}": f'"${OUT_VAR}"'}


def word(text: str) -> str:
    """One word of the command as shell text (see the module's rules)."""
    out, pos = [], 0
    for m in _PIECE.finditer(text):
        if m.start() > pos:
            out.append(shlex.quote(text[pos:m.start()]))
        token = m.group()
        out.append(_WORDS.get(token) or '"${' + token.strip("${}") + '}"')
        pos = m.end()
    if pos < len(text) or not out:
        out.append(shlex.quote(text[pos:]))
    return "".join(out)


def script_word(text: str) -> str:
    """A shell script the command hands to a shell (`sh -c TEXT`): that shell's own text, with
    {item} and {out} as the variables holding them, quoted for where they stand in the script
    (bare, inside "..." or inside '...'), so that its shell reads them as one word, never as code."""
    out, i, quote = [], 0, ""
    while i < len(text):
        name = next((v for k, v in (("{item}", ITEM_VAR), ("{out}", OUT_VAR)) if text.startswith(k, i)), None)
        if name is not None:
            out.append({"": f'"${name}"', '"': f"${{{name}}}", "'": f"'\"${name}\"'"}[quote])
            i += len("{item}" if name == ITEM_VAR else "{out}")
            continue
        c = text[i]
        if c == "\\" and quote != "'":  # the next character is taken as it is
            out.append(text[i:i + 2])
            i += 2
            continue
        if c in "'\"" and quote in ("", c):
            quote = "" if quote else c
        out.append(c)
        i += 1
    return shlex.quote("".join(out))


def is_script(words: Sequence[str], i: int) -> bool:
    """Is words[i] the script of a shell started by the command (`sh -c`, `bash -e -lc`, `env X=1 sh -c`)?"""
    j = i - 1
    while j >= 0 and words[j].startswith("-") and not words[j].startswith("--"):
        if j == i - 1 and "c" not in words[j][1:]:
            return False
        j -= 1
    return j < i - 1 and j >= 0 and words[j].rsplit("/", 1)[-1] in SHELLS


_is_script = is_script  # the name tests/test_command_line.py knows


def shell_text(command: Sequence[str]) -> str:
    """The command as one line of shell text (without `exec`)."""
    words = list(command)
    return " ".join(script_word(w) if is_script(words, i) else word(w) for i, w in enumerate(words))


def needs_shell(command: Sequence[str]) -> bool:
    """Does the command mean anything a shell must do ($NAME, {out}, {item} in a shell's script)?
    One that does not runs the same as an argv with {item} put in (DOK's exec form)."""
    words = list(command)
    for i, w in enumerate(words):
        if is_script(words, i):
            if "{item}" in w or "{out}" in w:
                return True
        elif any(m.group() != "{item}" for m in _PIECE.finditer(w)):
            return True
    return False


def exec_line(command: Sequence[str]) -> str:
    """`exec` of the command: the item's program replaces the shell (signals reach it)."""
    return f"exec {shell_text(command)}"
