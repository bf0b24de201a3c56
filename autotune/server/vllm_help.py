"""What the vLLM that will run accepts: its version and `vllm serve --help=all`, parsed and cached.

A space that names a flag or a choice this vLLM lacks is rejected before any boot. The help text
is cached per executable (resolved path, size, mtime), since producing it costs ~15 s of imports.
The help names no types, so beside it vLLM's own `serve` parser is built once in the executable's
interpreter (`KINDS_PROBE`) and each option's kind read from it (int, float, a boolean flag): a
value of the wrong type (`max_num_seqs: many`) is refused before a boot, as vLLM would refuse it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from autotune.config.cache import cache_dir
from autotune.errors import ConfigError
from autotune.server.command import param_name

# run by the executable's Python: each `vllm serve` option's kind, from vLLM's own parser (the
# path `vllm serve` itself takes, in vLLM 0.26 and 0.32). Printed as one JSON line.
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
    if not a.option_strings:
        continue
    t = inner(a.type)
    name = getattr(t, "__name__", "")
    if a.nargs == 0:
        kind = "bool" if "BooleanOptional" in type(a).__name__ else "flag"
    elif t is int or name == "human_readable_int":
        kind = "int"
    elif t is float:
        kind = "float"
    else:
        continue
    kinds[a.dest] = kind
print("KINDS " + json.dumps(kinds))
"""
_OPTION = re.compile(r"^\s{2}(-\S.*?)(?:\s{2,}|$)")
_LONG = re.compile(r"--([A-Za-z0-9][\w-]*)(?:\s+\{([^}]*)\})?")


@dataclass(frozen=True)
class VllmInfo:
    version: str
    flags: frozenset[str]  # snake_case, `no_` forms included
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # snake_case flag -> "int", "float", "bool" (--flag / --no-flag) or "flag" (--flag only);
    # empty when vLLM's parser could not be read (then values are not type-checked)
    kinds: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "flags": sorted(self.flags),
                "choices": {k: list(v) for k, v in self.choices.items()}, "kinds": self.kinds}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VllmInfo:
        return cls(str(d["version"]), frozenset(d["flags"]),
                   {k: tuple(v) for k, v in d["choices"].items()}, dict(d.get("kinds", {})))


def parse_help(text: str, version: str = "unknown") -> VllmInfo:
    flags: set[str] = set()
    choices: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        m = _OPTION.match(line)
        if not m:
            continue
        for name, ch in _LONG.findall(m.group(1)):
            p = param_name(name)
            flags.add(p)
            if ch:
                choices[p] = tuple(c.strip() for c in ch.split(","))
    return VllmInfo(version, frozenset(flags), choices)


def _exe_key(executable: list[str]) -> str:
    exe = shutil.which(executable[0]) or executable[0]
    parts = ["kinds-1", *executable]  # kinds-1: caches written before the kinds are read again
    try:
        st = os.stat(os.path.realpath(exe))
        parts += [os.path.realpath(exe), str(st.st_size), str(st.st_mtime_ns)]
    except OSError:
        pass
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def get_vllm_info(executable: list[str], env: dict[str, str] | None = None) -> VllmInfo:
    """Version and flags of `executable`'s vLLM (cached per executable)."""
    path = cache_dir() / "vllm-help" / f"{_exe_key(executable)}.json"
    if path.exists():
        return VllmInfo.from_json(json.loads(path.read_text()))
    run_env = {**os.environ, **(env or {})}
    try:
        ver = subprocess.Popen([*executable, "--version"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=run_env)
        hlp = subprocess.Popen([*executable, "serve", "--help=all"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=run_env)
        python = interpreter(executable)
        probe = subprocess.Popen([python, "-c", KINDS_PROBE], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, env=run_env) \
            if python else None
    except OSError as e:
        raise ConfigError(
            f"server.executable: cannot run {executable[0]!r}: {e.strerror}"
        ) from None
    try:
        help_text, _ = hlp.communicate(timeout=300)
        version_text, _ = ver.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        for proc in (hlp, ver, probe):
            if proc is not None:
                proc.kill()
                proc.communicate()
        raise ConfigError(f"server.executable: `{' '.join(executable)} serve --help=all` gave "
                          "no answer in 300 s; check that it runs on this machine") from None
    if hlp.returncode != 0 or "--max-num-seqs" not in help_text:
        tail = "\n".join(help_text.strip().splitlines()[-3:])
        raise ConfigError(f"server.executable: `{' '.join(executable)} serve --help=all` failed "
                          f"(exit {hlp.returncode}): {tail}")
    version = (version_text.strip().splitlines() or ["unknown"])[-1]
    info = parse_help(help_text, version)
    if probe is not None:
        try:  # the help has ended: the same imports take no longer here
            out, _ = probe.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            probe.kill()
            out, _ = probe.communicate()
        line = next((x for x in out.splitlines() if x.startswith("KINDS ")), "")
        if probe.returncode == 0 and line:  # else another layout of vLLM: values go unchecked
            info = VllmInfo(info.version, info.flags, info.choices, json.loads(line[6:]))
    path.parent.mkdir(parents=True, exist_ok=True)
    # another process (a local worker, a parallel test) may read it meanwhile: never half a file
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info.to_json()))
    tmp.replace(path)
    return info


def interpreter(executable: list[str]) -> str | None:
    """The Python that runs `executable`: itself, or a console script's shebang (None: neither,
    e.g. a wrapper shell script)."""
    exe = shutil.which(executable[0]) or executable[0]
    if "python" in os.path.basename(exe):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(300).decode(errors="replace")
    except OSError:
        return None
    if first.startswith("#!") and "python" in first:
        cmd = first[2:].split()
        return cmd[-1] if cmd and cmd[0].endswith("env") else (cmd[0] if cmd else None)
    return None


def wrong_type(kind: str | None, value: object) -> str | None:
    """Why vLLM would refuse `value` for an option of this kind (None: it would take it; a None
    value leaves the flag out)."""
    if value is None:
        return None
    if kind in ("bool", "flag"):
        if not isinstance(value, bool):
            return "takes true or false (the flag on or off), not a value"
        if kind == "flag" and value is False:
            return "has no --no- form: leave it out for vLLM's default"
        return None
    if kind not in ("int", "float") or isinstance(value, bool):
        return None if kind not in ("int", "float") else f"takes a number, not {value!r}"
    cast = int if kind == "int" else float
    if isinstance(value, float) and kind == "int" and not value.is_integer():
        return f"takes a whole number, not {value!r}"
    if isinstance(value, int | float):
        return None
    try:
        cast(str(value))
    except ValueError:
        if kind == "int" and re.fullmatch(r"\d+(\.\d+)?[kKmMgGtT]", str(value)):
            return None  # vLLM's human-readable sizes: 32k
        return f"takes {'a whole number' if kind == 'int' else 'a number'}, not {value!r}"
    return None


def check_flags(info: VllmInfo, flags: dict[str, list[object] | None], source: str) -> None:
    """Raise one ConfigError listing each flag (or choice) that this vLLM does not accept.

    `flags` maps a snake_case flag to the values that will be passed (None: not checked).
    """
    problems = []
    for flag, values in flags.items():
        if flag not in info.flags:
            close = sorted(f for f in info.flags if f.split("_")[0] == flag.split("_")[0])[:6]
            hint = f"; similar: {', '.join(close)}" if close else ""
            problems.append(f"{source}: {flag}: vLLM {info.version} has no flag "
                            f"--{flag.replace('_', '-')}{hint}")
            continue
        for v in values or ():
            why = wrong_type(info.kinds.get(flag), v)
            if why:
                problems.append(f"{source}: {flag}: vLLM {info.version}'s "
                                f"--{flag.replace('_', '-')} {why}")
        accepted = info.choices.get(flag)
        if accepted and values:
            bad = [v for v in values if isinstance(v, str) and v not in accepted]
            if bad:
                problems.append(f"{source}: {flag}: vLLM {info.version} does not accept "
                                f"{', '.join(map(repr, bad))}; accepted: {', '.join(accepted)}")
    if problems:
        raise ConfigError("\n".join(problems))

