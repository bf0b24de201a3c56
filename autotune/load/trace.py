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

The public traces read as they are, their names for these fields being aliases (`ALIASES`):
BurstGPT's CSV (`Timestamp,Model,Request tokens,Response tokens,...`), Azure's LLM inference
traces (`TIMESTAMP,ContextTokens,GeneratedTokens`, the timestamp a date-time), and OpenAI's
usage names (`prompt_tokens`, `completion_tokens`) in a gateway's log; their rows with no
response tokens (failed requests in the log) are skipped and counted. Other keys or columns
(an id, a model name) are read past and named in the note, unless one is a near miss of a
field (`output_len`), which is an error. Arrivals out of order are sorted (and counted); a
stray arrival far from the rest, and a rate that fits the other time unit better, are
autotune.load.trace_checks'. autotune.load.replay turns a window of a trace into requests.
"""

from __future__ import annotations

import csv
import difflib
import functools
import json
import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.load.trace_checks import Stamp, check_gaps, unit_hint

KEYS = ("timestamp", "input_length", "prompt", "output_length", "hash_ids")
# the public traces' names for the fields, read as the trace's own: BurstGPT's CSV, Azure's
# LLM inference traces (2023, 2024), OpenAI's usage (prompt_tokens) and the Responses and
# Anthropic APIs' (input_tokens)
ALIASES = {"Timestamp": "timestamp", "Request tokens": "input_length",
           "Response tokens": "output_length",
           "TIMESTAMP": "timestamp", "ContextTokens": "input_length",
           "GeneratedTokens": "output_length",
           "prompt_tokens": "input_length", "completion_tokens": "output_length",
           "input_tokens": "input_length", "output_tokens": "output_length"}
SHAPE = ("a line holds timestamp, input_length or prompt, output_length, and optionally "
         "hash_ids")


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
    ignored: tuple[str, ...] = ()  # keys or columns that are no field of a trace
    hint: str | None = None  # its rate fits the other time unit better (trace_checks)

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
        if self.ignored:
            text += f"; read past {', '.join(self.ignored)} (no field of a trace)"
        if self.hint:
            text += f"; warning: {self.hint}"
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
            at = datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp: {v!r} is neither a number nor an ISO-8601 date-time "
                             "(2024-05-01T12:00:00.250)") from None
        # a date-time without a zone (Azure's) as UTC: local time would put an hour's gap,
        # or an hour out of order, where the clocks change
        return "date", (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
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


@functools.cache  # once per name: a log's millions of lines repeat the same few keys
def _field(name: str, what: str) -> str | None:
    """The field a key or column names (a trace's own, or an alias), None for another; a near
    miss of one (output_len) is a ValueError: read past, it would lose its field."""
    if name in KEYS or name in ALIASES:
        return ALIASES.get(name, name)
    near = difflib.get_close_matches(name, [*KEYS, *ALIASES], 1, 0.8)
    if near:
        raise ValueError(f"unknown {what} {name!r}: is it {near[0]}? ({SHAPE})")
    return None


def _fields(item: dict[str, Any], what: str = "key") -> tuple[dict[str, Any], list[str]]:
    """A line's values by field, and its keys that are no field (read past)."""
    out: dict[str, Any] = {}
    named: dict[str, str] = {}
    other = []
    for k, v in item.items():
        f = _field(str(k), what)
        if f is None:
            other.append(str(k))
        elif f in named:
            raise ValueError(f"{named[f]} and {k} both give {f}: keep one")
        else:
            named[f], out[f] = str(k), v
    return out, other


def _entry(item: dict[str, Any], unit: str, block_size: int, tokenizer: Any,
           other: list[str] | None = None) -> tuple[str, float, TraceEntry]:
    """One line's request (its timestamp's kind, its arrival in s) from its values by field
    (`other`: its keys that are no field); ValueError saying why not."""
    beside = f" (its {', '.join(other)} {'is' if len(other) == 1 else 'are'} no field of a " \
        f"trace: {SHAPE})" if other else ""
    for key in ("timestamp", "output_length"):
        if item.get(key) in (None, ""):
            raise ValueError(f"{key}: missing (every request needs its arrival and the tokens "
                             f"it generated){beside}")
    kind, at = _stamp(item["timestamp"], unit)
    out = _count(item["output_length"], "output_length", 1)
    given = [k for k in ("input_length", "prompt") if item.get(k) not in (None, "")]
    if len(given) != 1:
        raise ValueError(f"give input_length or prompt (one of them){beside}" if not given else
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
    """(line number, values by field, keys read past) of each request of a JSONL or CSV file;
    None for the values of a failed request in a public log (`_failed`)."""
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
                try:
                    values, other = _fields(item)
                except ValueError as err:
                    raise _bad(path, n, str(err)) from None
                yield n, None if _failed(item) else values, other
            return
        reader = csv.DictReader(f)
        cols = list(reader.fieldnames or [])
        try:
            values, other = _fields({c: c for c in cols}, "column")
        except ValueError as err:
            raise _bad(path, 1, str(err)) from None
        by_field: dict[str, str] = values
        need = ["timestamp", "output_length"]
        need += [] if {"input_length", "prompt"} & set(by_field) else ["input_length"]
        for field in need:
            if field not in by_field:
                raise _bad(path, 1, f"no {field} column: the header names {', '.join(cols)}; "
                                    "a trace's columns are timestamp, input_length or prompt, "
                                    "output_length, and optionally hash_ids (or a public "
                                    "trace's: BurstGPT's, Azure's; docs/workloads.md)")
        for row in reader:
            if None in row:
                raise _bad(path, reader.line_num, f"{len(cols) + len(row[None])} cells, the "
                                                  f"header names {len(cols)}")
            item = {col: row[col] for col in by_field.values()}
            yield reader.line_num, None if _failed(item) else \
                {field: row[col] for field, col in by_field.items()}, other


def _failed(item: dict[str, Any]) -> bool:
    """A row of a public log with no output tokens: a failed request in BurstGPT's log (and
    Azure's, a gateway's); in a trace's own `output_length` a 0 is a mistake, an error."""
    return any(str(v).strip() == "0" for k, v in item.items()
               if k != "output_length" and ALIASES.get(k) == "output_length")


def read_trace(path: str, time_unit: str, block_size: int, tokenizer: Any,
               max_len: int | None, source: str = "the model's limit") -> Trace:
    """Every request of a trace file, checked; ConfigError naming the line and the field for
    the first one that is not a request, and for a trace with no timeline to replay."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"profile.path: {path} does not exist (a JSONL or CSV trace, one "
                          "request a line; `autotune make-trace` writes one)")
    got: list[TraceEntry] = []
    stamps: list[Stamp] = []  # every request's arrival, the dropped too: the file's timeline
    kinds: set[str] = set()
    ignored: dict[str, None] = {}  # keys read past, in the order met
    lines = dropped = skipped = 0
    try:
        for n, item, other in _rows(file, path):
            lines += 1
            ignored.update(dict.fromkeys(other))
            if item is None:
                skipped += 1
                continue
            try:
                kind, _at, e = _entry(item, time_unit, block_size, tokenizer, other)
            except ValueError as err:
                raise _bad(path, n, str(err)) from None
            stamps.append(Stamp(e.at_s, n, item["timestamp"]))
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
    check_gaps(stamps, path)
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
    trace = Trace(entries, path, block_size, lines, dropped, skipped, reordered, max_len,
                  source, tuple(ignored))
    hint = unit_hint(trace.rate, time_unit) if kinds == {"number"} else None
    return replace(trace, hint=hint) if hint else trace
