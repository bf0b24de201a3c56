"""lab/gpu/install_wheels.sh, the one install every GPU script runs: a wheel carried in
pieces (NAME.whl.part000, .part001: a call carries at most 64 MiB) is made whole, every wheel is
installed into one folder, and its activate file puts that folder first. Here on a wheel built
for the test, in temporary folders instead of /root/w and /root/site."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "lab" / "gpu" / "install_wheels.sh"


def _wheel(path: Path) -> bytes:
    files = {"tinywheel_at/__init__.py": "WHO = 'installed'\n",
             "tinywheel_at-0.1.dist-info/METADATA":
                 "Metadata-Version: 2.1\nName: tinywheel-at\nVersion: 0.1\n",
             "tinywheel_at-0.1.dist-info/WHEEL":
                 "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},,\n" for n in files) + "tinywheel_at-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, "tinywheel_at-0.1.dist-info/RECORD": record}.items():
            z.writestr(name, text)
    return path.read_bytes()


def test_pieces_are_joined_installed_and_activated(tmp_path: Path) -> None:
    wheels, site = tmp_path / "w", tmp_path / "site"
    wheels.mkdir()
    whl = wheels / "tinywheel_at-0.1-py3-none-any.whl"
    data = _wheel(whl)
    whl.unlink()
    half = len(data) // 2
    (wheels / f"{whl.name}.part000").write_bytes(data[:half])
    (wheels / f"{whl.name}.part001").write_bytes(data[half:])
    env = {**os.environ, "GPU_WHEELS": str(wheels), "GPU_SITE": str(site),
           "GPU_PYTHON": sys.executable}
    p = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("installed in ")
    assert whl.read_bytes() == data and not list(wheels.glob("*.part*"))
    assert (site / "tinywheel_at" / "__init__.py").is_file()
    use = subprocess.run(["bash", "-c", f"source {site}/activate && {sys.executable} -c "
                          "'import tinywheel_at; print(tinywheel_at.WHO, tinywheel_at.__file__)'"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""},
                         timeout=60)
    assert use.returncode == 0, use.stderr
    assert use.stdout.split() == ["installed", str(site / "tinywheel_at" / "__init__.py")]


def test_a_wheel_that_does_not_install_stops_the_script(tmp_path: Path) -> None:
    wheels = tmp_path / "w"
    wheels.mkdir()
    (wheels / "broken-0.1-py3-none-any.whl").write_bytes(b"not a zip")
    env = {**os.environ, "GPU_WHEELS": str(wheels), "GPU_SITE": str(tmp_path / "site"),
           "GPU_PYTHON": sys.executable}
    p = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 1 and "installed in" not in p.stdout
    assert not (tmp_path / "site" / "activate").exists()
