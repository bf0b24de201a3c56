"""A user's own requests (profile `dataset`).

`read_dataset` reads a user's own requests (profile `dataset`): a JSONL file, one request a line,
`{"prompt": "..."}` (completions) or `{"messages": [...]}` (chat), optional `output_tokens`. The
client counts each prompt's tokens as the server will: the text encoded with the tokenizer's
special tokens (completions), or the model's chat template rendered with a generation prompt
and encoded as is (chat). Requests longer than the model allows are dropped and counted.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config.hub import cached
from autotune.errors import ConfigError
from autotune.load.record import Request


@dataclass(frozen=True)
class Dataset:
    """A user's requests as read: the ones that fit, and how many did not."""

    requests: list[Request]
    lines: int
    dropped: int
    max_len: int | None
    source: str = "the model's limit"  # what sets max_len
    kept_lines: tuple[str, ...] = ()  # the file's lines that were kept, as written

    def write_kept(self, path: Path) -> Path:
        """The kept lines as a JSONL file of their own (what `vllm bench serve --dataset-path`
        should read: the whole file holds the lines the study dropped)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in self.kept_lines))
        return path

    def note(self, path: str) -> str:
        text = f"dataset {path}: {self.lines} requests, {len(self.requests)} kept"
        if self.dropped:
            text += (f", {self.dropped} dropped before the first boot (prompt + output longer "
                     f"than {self.max_len} tokens, {self.source})")
        return text


def _chat_template(tokenizer_dir: str) -> tuple[Any, dict[str, str]] | None:
    """The model's chat template (tokenizer_config.json) compiled as transformers compiles it,
    with the special tokens it may name; None when it has none."""
    path = Path(cached(tokenizer_dir) or tokenizer_dir) / "tokenizer_config.json"
    conf = json.loads(path.read_text()) if path.exists() else {}
    template = conf.get("chat_template")
    specials = {k: v for k, v in conf.items() if k.endswith("_token") and isinstance(v, str)}
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    if not template:
        return None
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template), specials


DATASET_KEYS = {"prompt", "messages", "output_tokens"}


def _bad(path: str, n: int, why: str) -> ConfigError:
    return ConfigError(f"profile.path: {path}, line {n}: {why}")


def read_dataset(path: str, endpoint: str, tokenizer: Any, tokenizer_dir: str,
                 default_output: int, max_len: int | None,
                 source: str = "the model's limit") -> Dataset:
    """Every request of a JSONL file, counted in tokens; ConfigError naming the line for a
    line that is not a request, and for chat messages when the endpoint is completions."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"profile.path: {path} does not exist (a JSONL file, one request a "
                          "line; examples/requests.jsonl shows the format)")
    template = None
    kept: list[Request] = []
    kept_lines: list[str] = []
    lines = dropped = 0
    # utf-8-sig: a file saved with a byte-order mark (Windows editors) reads the same
    with file.open(encoding="utf-8-sig") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                # without its line end: json places an error at the end of the text on the
                # next line otherwise ("line 2 column 1" for a line cut short)
                item = json.loads(raw.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                # some of json's messages end in "at" ("Invalid control character at")
                why = e.msg.removesuffix(" at")
                raise _bad(path, n, f"not JSON ({why} at column {e.colno})") from None
            if not isinstance(item, dict) or not ("prompt" in item or "messages" in item):
                raise _bad(path, n, 'neither "prompt" nor "messages" (one of them per line)')
            unknown = sorted(set(item) - DATASET_KEYS)
            if unknown:
                raise _bad(path, n, f"unknown key {unknown[0]!r}: a line holds \"prompt\" or "
                                    "\"messages\", and optionally \"output_tokens\" (sampling "
                                    "settings such as temperature are not sent)")
            out = item.get("output_tokens", default_output)
            if isinstance(out, bool) or not isinstance(out, int) or out < 1:
                raise _bad(path, n, f"output_tokens: {out!r} is not a token count (1 or more)")
            lines += 1
            if "messages" in item:
                msgs = item["messages"]
                if endpoint != "chat":
                    raise _bad(path, n, "chat messages need the chat endpoint; set "
                                        "profile.endpoint: chat (prompt lines then go as a "
                                        "user message)")
                if not isinstance(msgs, list) or not msgs or not all(
                        isinstance(m, dict) and isinstance(m.get("role"), str)
                        and isinstance(m.get("content"), str) for m in msgs):
                    raise _bad(path, n, 'messages: a list of {"role": ..., "content": "..."}')
                prompt: str | list[dict[str, Any]] = msgs
            else:
                if not isinstance(item["prompt"], str) or not item["prompt"]:
                    raise _bad(path, n, "prompt: a non-empty string")
                prompt = item["prompt"]
            if endpoint == "chat":
                if template is None:
                    template = _chat_template(tokenizer_dir)
                    if template is None:
                        raise ConfigError(f"profile.endpoint: chat needs the model's chat "
                                          f"template; {tokenizer_dir} has none in "
                                          "tokenizer_config.json")
                msgs = prompt if isinstance(prompt, list) else [
                    {"role": "user", "content": prompt}]
                text = template[0].render(messages=msgs, add_generation_prompt=True,
                                          **template[1])
                n_tokens = len(tokenizer.encode(text, add_special_tokens=False).ids)
            else:
                assert isinstance(prompt, str)
                n_tokens = len(tokenizer.encode(prompt, add_special_tokens=True).ids)
            if max_len is not None and n_tokens + out > max_len:
                dropped += 1
                continue
            kept.append(Request(prompt=prompt, prompt_len=n_tokens, output_len=out))
            kept_lines.append(raw.rstrip("\r\n"))
    if not lines:
        raise ConfigError(f"profile.path: {path} holds no request")
    if not kept:
        raise ConfigError(f"profile.path: every request of {path} is longer than {max_len} "
                          f"tokens ({source}); raise that limit or shorten the requests")
    return Dataset(kept, lines, dropped, max_len, source, tuple(kept_lines))


def sample_dataset(ds: Dataset, n: int, how: str, seed: int) -> list[Request]:
    """`n` of a dataset's requests: the first ones in order (cycling when there are fewer),
    or drawn with the seed."""
    if how == "random":
        rng = random.Random(seed)
        return [rng.choice(ds.requests) for _ in range(n)] if n > len(ds.requests) else \
            rng.sample(ds.requests, n)
    return [ds.requests[i % len(ds.requests)] for i in range(n)]
