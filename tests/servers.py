"""Starting the test model's server the way the integration tests do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autotune.config.study import ServerConfig
from autotune.measure.runner import server_env
from autotune.server.command import serve_argv
from autotune.server.lifecycle import ServerProcess
from autotune.server.process import free_port


@contextmanager
def serving(server_config: ServerConfig, workdir: Path, **args: object
            ) -> Iterator[ServerProcess]:
    """A healthy `vllm serve` of the test model, with `args` over the test server's args."""
    argv = serve_argv(server_config.executable, server_config.model,
                      {**server_config.args, **args})
    with ServerProcess(argv, log_path=workdir / "server.log", port=free_port(),
                       env=server_env(server_config, workdir)) as proc:
        proc.wait_healthy(server_config.boot_timeout_s)
        yield proc
