"""A user's traffic as recorded (profile `trace`): timestamped requests read from JSONL or CSV,
checked line by line before anything is measured.

One request a line (JSONL) or a row (CSV with a header), the Mooncake layout:

    timestamp      its arrival: a number (seconds; `time_unit: ms` for milliseconds) or an
                   ISO-8601 date-time; absolute or from the trace's start, the first arrival
                   becomes 0
    input_length   its prompt's tokens, or instead
    prompt         its prompt's text (counted with the model's tokenizer, as the server counts)
    output_length  the tokens it generated (generation runs to it: ignore_eos)
    hash_ids       optional, with input_length: one id per block of `block_size` prompt tokens,
                   ceil(input_length / block_size) of them; requests that share an id share
                   that block, so a prefix cache meets the reuse it met in production

A BurstGPT CSV (`Timestamp,Model,Request tokens,Response tokens,...`) reads as it is; its rows
with no response tokens (failed requests in its log) are skipped and counted. Arrivals out of
order are sorted (and counted). autotune.load.replay turns a window of a trace into requests.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

KEYS = ("timestamp", "input_length", "prompt", "output_length", "hash_ids")
# BurstGPT's columns (its release's CSV), read as the trace's own
BURSTGPT = {"Timestamp": "timestamp", "Request tokens": "input_length",
            "Response tokens": "output_length"}
BURSTGPT_OTHER = {"Model", "Total tokens", "Log Type"}


@dataclass(frozen=True)
class TraceEntry:
    """One recorded request: its arrival (seconds from the trace's first), its lengths in
    tokens, its prompt's blocks (Mooncake hash ids) or its text, and its line in the file."""

    at_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()
    text: str | None = None
    line: int = 0


@dataclass(frozen=True)
class Trace:
    """A trace as read: the requests that fit, in arrival order, and what was left out."""

    entries: tuple[TraceEntry, ...]
    path: str
    block_size: int
    lines: int  # requests in the file
    dropped: int = 0  # longer than max_len
    skipped: int = 0  # BurstGPT rows with no response tokens
    reordered: int = 0  # arrivals earlier than the one before, sorted
    max_len: int | None = None
    source: str = "the model's limit"

    @property
    def span_s(self) -> float:
        return self.entries[-1].at_s - self.entries[0].at_s

    @property
    def rate(self) -> float:
        """Its mean arrival rate, requests/s (n - 1 gaps over its span)."""
        return (len(self.entries) - 1) / self.span_s

    @property
    def has_text(self) -> bool:
        return any(e.text is not None for e in self.entries)

    def note(self) -> str:
        text = (f"trace {self.path}: {self.lines} requests over {self.span_s:,.1f} s "
                f"({self.rate:,.3g} req/s recorded), {len(self.entries)} kept")
        shared = len({h for e in self.entries for h in e.hash_ids})
        blocks = sum(len(e.hash_ids) for e in self.entries)
        if blocks:
            text += f"; {blocks - shared} of {blocks} prompt blocks repeat an earlier one"
        for n, why in ((self.dropped, f"dropped (prompt + output longer than {self.max_len} "
                        f"tokens, {self.source})"),
                       (self.skipped, "skipped (no response tokens: failed in the log)"),
                       (self.reordered, "out of order (sorted by arrival)")):
            if n:
                text += f", {n} {why}"
        return text


def _bad(path: str, n: int, why: str) -> ConfigError:
    return ConfigError(f"profile.path: {path}, line {n}: {why}")


def _count(v: Any, key: str, least: int) -> int:
    if isinstance(v, str) and v.strip().isdigit():  # a CSV cell
        v = int(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ValueError(f"{key}: {v!r} is not a token count ({least} or more)")
    return v


def _stamp(v: Any, unit: str) -> tuple[str, float]:
    """("number" | "date", seconds)."""
    if isinstance(v, str):
        t = v.strip()
        try:
            return "number", float(t) * (0.001 if unit == "ms" else 1.0)
        except ValueError:
            pass
        try:
            return "date", datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ValueError(f"timestamp: {v!r} is neither a number nor an ISO-8601 date-time "
                             "(2024-05-01T12:00:00.250)") from None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"timestamp: {v!r} is not a number of {unit} or an ISO-8601 date-time")
    return "number", float(v) * (0.001 if unit == "ms" else 1.0)


def _hash_ids(v: Any) -> tuple[int, ...]:
    if isinstance(v, str):  # a CSV cell: "1 2 3", "1;2;3" or "[1, 2, 3]"
        t = v.strip()
        if t.startswith("["):
            v = json.loads(t)
        else:
            parts = t.replace(";", " ").replace(",", " ").split()
            if not all(p.isdigit() for p in parts):
                raise ValueError(f"hash_ids: {v!r} is not a list of block ids (whole numbers)")
            v = [int(p) for p in parts]
    if not isinstance(v, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in v):
        raise ValueError(f"hash_ids: {v!r} is not a list of block ids (whole numbers, 0 or "
                         "more)")
    return tuple(v)


def _entry(item: dict[str, Any], unit: str, block_size: int, tokenizer: Any
           ) -> tuple[str, float, TraceEntry]:
    """One line's request (its timestamp's kind, its arrival in s); ValueError saying why not."""
    unknown = sorted(set(item) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}: a line holds timestamp, input_length or "
                         "prompt, output_length, and optionally hash_ids")
    for key in ("timestamp", "output_length"):
        if item.get(key) in (None, ""):
            raise ValueError(f"{key}: missing (every request needs its arrival and the tokens "
                             "it generated)")
    kind, at = _stamp(item["timestamp"], unit)
    out = _count(item["output_length"], "output_length", 1)
    given = [k for k in ("input_length", "prompt") if item.get(k) not in (None, "")]
    if len(given) != 1:
        raise ValueError("give input_length or prompt (one of them)" if not given else
                         "input_length and prompt: give one (the prompt's text, or its length "
                         "in tokens)")
    if given[0] == "prompt":
        if not isinstance(item["prompt"], str):
            raise ValueError("prompt: a string (the prompt's text)")
        if item.get("hash_ids") not in (None, "", []):
            raise ValueError("hash_ids: a prompt's text makes its own prefixes; hash_ids go "
                             "with input_length")
        n = len(tokenizer.encode(item["prompt"], add_special_tokens=True).ids)
        return kind, at, TraceEntry(at, n, out, text=item["prompt"])
    length = _count(item["input_length"], "input_length", 1)
    ids = _hash_ids(item["hash_ids"]) if item.get("hash_ids") not in (None, "") else ()
    need = math.ceil(length / block_size)
    if ids and len(ids) != need:
        raise ValueError(f"hash_ids: {len(ids)} ids for input_length {length}, which fills "
                         f"{need} blocks of {block_size} tokens (profile.block_size: the "
                         "tokens one id stands for; Mooncake's traces use 512)")
    return kind, at, TraceEntry(at, length, out, ids)


def _rows(file: Path, path: str) -> Any:
    """(line number, mapping) of each request of a JSONL or CSV file."""
    with file.open(encoding="utf-8-sig", newline="") as f:
        first = ""
        while not first.strip() and (line := f.readline()):
            first = line
        f.seek(0)
        if first.lstrip().startswith("{") or file.suffix == ".jsonl":
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    item = json.loads(raw)
                except json.JSONDecodeError as e:
                    why = e.msg.removesuffix(" at")
                    raise _bad(path, n, f"not JSON ({why} at column {e.colno})") from None
                if not isinstance(item, dict):
                    raise _bad(path, n, "not a request (a JSON object: {\"timestamp\": ..., "
                                        "\"input_length\": ..., \"output_length\": ...})")
                yield n, item
            return
        reader = csv.DictReader(f)
        cols = list(reader.fieldnames or [])
        burst = set(BURSTGPT) <= set(cols)
        if burst:
            cols = [c for c in cols if c not in BURSTGPT_OTHER]
        for c in cols:
            if BURSTGPT.get(c, c) not in KEYS:
                raise _bad(path, 1, f"unknown column {c!r}: the header names timestamp, "
                                    "input_length or prompt, output_length, and optionally "
                                    "hash_ids (or is BurstGPT's)")
        for row in reader:
            if None in row:
                raise _bad(path, reader.line_num, f"{len(cols) + len(row[None])} cells, the "
                                                  f"header names {len(cols)}")
            item = {BURSTGPT.get(c, c): row[c] for c in cols}
            if burst and str(item.get("output_length", "")).strip() == "0":
                yield reader.line_num, None  # a failed request in BurstGPT's log
                continue
            yield reader.line_num, item


def read_trace(path: str, time_unit: str, block_size: int, tokenizer: Any,
               max_len: int | None, source: str = "the model's limit") -> Trace:
    """Every request of a trace file, checked; ConfigError naming the line and the field for
    the first one that is not a request, and for a trace with no timeline to replay."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"profile.path: {path} does not exist (a JSONL or CSV trace, one "
                          "request a line; `autotune make-trace` writes one)")
    got: list[TraceEntry] = []
    kinds: set[str] = set()
    lines = dropped = skipped = 0
    try:
        for n, item in _rows(file, path):
            lines += 1
            if item is None:
                skipped += 1
                continue
            try:
                kind, _at, e = _entry(item, time_unit, block_size, tokenizer)
            except ValueError as err:
                raise _bad(path, n, str(err)) from None
            kinds.add(kind)
            if len(kinds) > 1:
                raise _bad(path, n, "timestamp: numbers and date-times mixed in one trace; "
                                    "write every arrival the same way")
            if max_len is not None and e.input_len + e.output_len > max_len:
                dropped += 1
                continue
            got.append(TraceEntry(e.at_s, e.input_len, e.output_len, e.hash_ids, e.text, n))
    except UnicodeDecodeError as e:
        raise ConfigError(f"profile.path: {path}: not UTF-8 text ({e.reason} at byte "
                          f"{e.start})") from None
    except csv.Error as e:
        raise ConfigError(f"profile.path: {path}: not a CSV file ({e})") from None
    if not lines:
        raise ConfigError(f"profile.path: {path} holds no request")
    if len(got) < 2:
        raise ConfigError(f"profile.path: {path}: {len(got)} request(s) left to replay "
                          f"({dropped} longer than {max_len} tokens, {source}); a trace needs "
                          "two or more, a timeline")
    reordered = sum(b.at_s < a.at_s for a, b in zip(got, got[1:], strict=False))
    got.sort(key=lambda e: e.at_s)  # stable: ties keep the file's order
    zero = got[0].at_s
    entries = tuple(TraceEntry(e.at_s - zero, e.input_len, e.output_len, e.hash_ids, e.text,
                               e.line) for e in got)
    if entries[-1].at_s <= 0:
        raise ConfigError(f"profile.path: {path}: every request arrives at the same time, so "
                          "there is no timeline to replay; give their arrivals")
    return Trace(entries, path, block_size, lines, dropped, skipped, reordered, max_len, source)
