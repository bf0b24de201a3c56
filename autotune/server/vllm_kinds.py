"""The type of each `vllm serve` option, read from vLLM's own parser, and the values it refuses.

`vllm serve --help=all` names no types, so vLLM's `serve` parser is built once in the
executable's own Python (`KINDS_PROBE`, the path `vllm serve` itself takes in vLLM 0.26 and 0.32)
and each option's kind read from it: "int", "size" (vLLM's human-readable integers: 32k, 2M),
"float", "bool" (--flag / --no-flag) or "flag" (--flag only). A value of the wrong type
(`max_num_seqs: many`) is then refused before a boot, as vLLM's parser would refuse it at every
boot. Where the parser cannot be read (a wrapper script, another layout of vLLM), values are
checked against the help's flag names and choices only, and the study says so once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from autotune.server.command import param_name

# printed as one JSON line: every long option name -> its kind
KINDS_PROBE = r"""
import json
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.cli.serve import ServeSubcommand
top = FlexibleArgumentParser()
parser = ServeSubcommand().subparser_init(top.add_subparsers())
def inner(t):
    for cell in getattr(t, "__closure__", None) or ():
        if cell.cell_contents in (int, float):
            return cell.cell_contents
    return t
kinds = {}
for a in parser._actions:
    t = inner(a.type)
    name = getattr(t, "__name__", "")
    if a.nargs == 0:
        kind = "bool" if "BooleanOptional" in type(a).__name__ else "flag"
    elif t is int:
        kind = "int"
    elif name == "human_readable_int":
        kind = "size"
    elif t is float:
        kind = "float"
    else:
        continue
    for opt in a.option_strings:
        if opt.startswith("--") and not opt.startswith("--no-"):
            kinds[opt] = kind
print("KINDS " + json.dumps(kinds))
"""
PROBE_TIMEOUT_S = 120.0  # after the help has ended: the same imports, already in the page cache
_SIZE = re.compile(r"\d+[kKmMgGtT]|\d+\.\d+[kmgt]")  # vLLM's human_readable_int


def interpreter(executable: list[str]) -> str | None:
    """The Python that runs `executable`: itself, or a console script's shebang (`#!/path/python`
    or `#!/usr/bin/env [-S] [VAR=value] python3 [-u]`); None for anything else (a shell wrapper:
    then the kinds go unread)."""
    exe = shutil.which(executable[0]) or executable[0]
    if "python" in os.path.basename(exe):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(300).decode(errors="replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return words[0] if words and "python" in os.path.basename(words[0]) else None


def start_probe(executable: list[str], env: dict[str, str]) -> subprocess.Popen[str] | None:
    """The probe, running beside the help (None: no Python to run it in, or it would not
    start)."""
    python = interpreter(executable)
    if python is None:
        return None
    try:
        return subprocess.Popen([python, "-c", KINDS_PROBE], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
    except OSError:
        return None


def read_probe(probe: subprocess.Popen[str] | None) -> tuple[dict[str, str] | None, str]:
    """(kinds by snake_case flag, why not): {} with a reason when this vLLM's parser cannot be
    read (kept: it will not change), None when the probe gave no answer in time (not kept: the
    next study tries again)."""
    if probe is None:
        return {}, "the executable is not a Python console script"
    try:
        out, _ = probe.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.communicate()
        return None, f"reading them took over {PROBE_TIMEOUT_S:g} s"
    line = next((x for x in out.splitlines() if x.startswith("KINDS ")), "")
    if probe.returncode != 0 or not line:
        return {}, f"its parser could not be built (exit {probe.returncode})"
    return {param_name(k): v for k, v in json.loads(line[6:]).items()}, ""


def wrong_type(kind: str | None, value: object) -> str | None:
    """Why vLLM would refuse `value` for an option of this kind (None: it would take it; a None
    value leaves the flag out). Values are rendered as `str(value)` (server/command.py), so a
    float for an integer option reaches vLLM as "256.0", which int() refuses."""
    if value is None or kind is None:
        return None
    if kind in ("bool", "flag"):
        if not isinstance(value, bool):
            return "takes true or false (the flag on or off), not a value"
        return "has no --no- form: leave it out for vLLM's default" \
            if kind == "flag" and value is False else None
    if isinstance(value, bool):
        return f"takes a number, not {value!r}"
    text = str(value).strip()
    if kind == "float":
        try:
            float(text)
            return None
        except ValueError:
            return f"takes a number, not {value!r}"
    if re.fullmatch(r"-?\d+", text) or (kind == "size" and _SIZE.fullmatch(text)):
        return None
    sizes = " or a size such as 32k" if kind == "size" else ""
    return f"takes a whole number{sizes}, not {value!r}"
