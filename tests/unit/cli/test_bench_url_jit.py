"""`autotune bench --url` at one load reads the running server's log as a booted bench does: a
kernel vLLM compiled during the load (or its warm-up) is counted and named, with the flag that
covers it; without --server-log the run says that compilations are not watched and counts none.
The server is a fake OpenAI server that streams its tokens and writes vLLM's JIT monitor line
into its log at the first request (the line as vLLM 0.26.0 logged it on an H100)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.cli.test_bad_input import bench
from tests.unit.measure.test_jit import BOOT_LINES, JIT_LINE


class _Streams(BaseHTTPRequestHandler):
    """Lists one model; streams each completion's max_tokens tokens; the first request makes
    the server's log say a kernel compiled."""

    log: Path | None = None
    compiled = False

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": "served-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        cls = type(self)
        if cls.log is not None and not cls.compiled:
            cls.compiled = True
            with cls.log.open("a") as f:
                f.write(JIT_LINE + "\n")
        n = int(req.get("max_tokens") or 4)
        events = [{"choices": [{"text": "x"}]} for _ in range(n)]
        events.append({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for e in events:
            self.wfile.write(f"data: {json.dumps(e)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def streaming(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    log = tmp_path / "server.log"
    log.write_text("\n".join(BOOT_LINES) + "\n")  # the boot's lines come before the mark
    handler = type("Handler", (_Streams,), {"log": log, "compiled": False})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", log
    httpd.shutdown()
    httpd.server_close()


def test_a_load_on_a_running_server_names_the_kernel_it_compiled(
        tmp_path: Path, tiny_model: Path, streaming: tuple[str, Path]) -> None:
    url, log = streaming
    out = tmp_path / "one.json"
    p = bench(tmp_path, tiny_model, "--model", "served-model", "--url", url, "--server-log",
              str(log), "--output", str(out))
    said = " ".join((p.stdout + p.stderr).split())
    assert p.returncode == 0, said[-2000:]
    assert "compiled 1 kernel(s) during this load or its warm-up (fused_moe_kernel)" in said
    assert "a larger --warmup covers them" in said and "not watched" not in said
    assert json.loads(out.read_text())["server_stats"]["jit_events"] == 1.0


def test_a_load_without_the_servers_log_is_not_watched(
        tmp_path: Path, tiny_model: Path, streaming: tuple[str, Path]) -> None:
    url, _log = streaming
    out = tmp_path / "one.json"
    p = bench(tmp_path, tiny_model, "--model", "served-model", "--url", url, "--output",
              str(out))
    said = " ".join((p.stdout + p.stderr).split())
    assert p.returncode == 0, said[-2000:]
    assert "kernel compilations are not watched (no --server-log)" in said
    assert "compiled" not in said.replace("compilations", "")
    assert "jit_events" not in json.loads(out.read_text())["server_stats"]
