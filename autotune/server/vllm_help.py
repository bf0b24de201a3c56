"""What the vLLM that will run accepts: its version and `vllm serve --help=all`, parsed and cached.

A space that names a flag or a choice this vLLM lacks is rejected before any boot. The help text
is cached per executable (resolved path, size, mtime), since producing it costs ~15 s of imports.
Beside the help, each option's type is read from vLLM's own parser (server/vllm_kinds.py) and
cached with it, so a value of the wrong type is refused before a boot too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass, field
from typing import Any

from autotune.config.cache import cache_dir
from autotune.errors import ConfigError
from autotune.server.command import param_name
from autotune.server.vllm_kinds import read_probe, start_probe, wrong_type

_OPTION = re.compile(r"^\s{2}(-\S.*?)(?:\s{2,}|$)")
_LONG = re.compile(r"--([A-Za-z0-9][\w-]*)(?:\s+\{([^}]*)\})?")


@dataclass(frozen=True)
class VllmInfo:
    version: str
    flags: frozenset[str]  # snake_case, `no_` forms included
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # snake_case flag -> its kind (server/vllm_kinds.py: int, size, float, bool, flag); empty
    # when vLLM's parser could not be read (then values are not type-checked)
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
    parts = ["kinds-2", *executable]  # kinds-2: caches written before the kinds are read again
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
        info = VllmInfo.from_json(json.loads(path.read_text()))
        if not info.kinds:
            _unchecked(info.version, "not readable from this executable")
        return info
    run_env = {**os.environ, **(env or {})}
    procs: list[subprocess.Popen[str]] = []
    try:  # every process started here is reaped, whatever ends this
        try:
            ver = subprocess.Popen([*executable, "--version"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, env=run_env)
            procs.append(ver)
            hlp = subprocess.Popen([*executable, "serve", "--help=all"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=run_env)
            procs.append(hlp)
        except OSError as e:
            raise ConfigError(
                f"server.executable: cannot run {executable[0]!r}: {e.strerror}"
            ) from None
        probe = start_probe(executable, run_env)
        procs += [probe] if probe is not None else []
        try:
            help_text, _ = hlp.communicate(timeout=300)
            version_text, _ = ver.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"server.executable: `{' '.join(executable)} serve --help=all` "
                              "gave no answer in 300 s; check that it runs on this machine"
                              ) from None
        if hlp.returncode != 0 or "--max-num-seqs" not in help_text:
            tail = "\n".join(help_text.strip().splitlines()[-3:])
            raise ConfigError(f"server.executable: `{' '.join(executable)} serve --help=all` "
                              f"failed (exit {hlp.returncode}): {tail}")
        kinds, why = read_probe(probe)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    version = (version_text.strip().splitlines() or ["unknown"])[-1]
    help_info = parse_help(help_text, version)
    info = VllmInfo(version, help_info.flags, help_info.choices, kinds or {})
    if not kinds:
        _unchecked(version, why)
    if kinds is None:  # no answer in time: the next study asks again
        return info
    path.parent.mkdir(parents=True, exist_ok=True)
    # another process (a local worker, a parallel test) may read it meanwhile: never half a file
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info.to_json()))
    tmp.replace(path)
    return info


def _unchecked(version: str, why: str) -> None:
    warnings.warn(f"vLLM {version}'s option types could not be read ({why}): server.args and "
                  "the search space are checked against its flag names and choices only",
                  stacklevel=3)


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

