"""Benchmark: the air-gapped runtime install on lab hosts (root; boots a lab of 4 hosts).

    .venv/bin/python -m bench.lab_runtime_install

Measures, in one run: building the wheelhouse on the control machine (cold, into a temporary directory), then
copying it to a host and installing TensorFlow from it (``venv`` + ``pip install --no-index --find-links``) on
1 host alone and on 3 hosts at once, and the disk each host needs. Prints the 3-host/1-host ratio: on 2 cores the
install is CPU-bound (unzip + byte-compile), so 3 hosts cost up to ~3x. These are the figures the lab flow
fixture's budget rests on (tests/lab/conftest.py, flow_lab).
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lab import Lab
from tfcluster.prepare.wheelhouse import DEFAULT_DEST, DEFAULT_REQUIREMENTS, build, size_bytes

REPO = Path(__file__).resolve().parents[1]

log = logging.getLogger("bench.lab_runtime_install")
NAMES = ("bi-0", "bi-1", "bi-2", "bi-3")
VENV = "/opt/tfcluster/venv"


def install(lab: Lab, host: str, wheelhouse: Path) -> dict[str, float]:
    """Copy the wheelhouse and install the requirements from it; seconds per phase."""
    times: dict[str, float] = {}
    t = time.monotonic()
    lab.ssh(host, "mkdir -p /opt/tfcluster")
    lab.copy_to(host, wheelhouse, "/opt/tfcluster/wheelhouse")
    lab.copy_to(host, DEFAULT_REQUIREMENTS, "/opt/tfcluster/requirements.txt")
    times["copy"] = time.monotonic() - t
    t = time.monotonic()
    lab.ssh(host, f"python3 -m venv {VENV} && {VENV}/bin/python -m pip install -q --disable-pip-version-check "
                  "--no-index --find-links /opt/tfcluster/wheelhouse -r /opt/tfcluster/requirements.txt",
            timeout=900)
    times["pip"] = time.monotonic() - t
    t = time.monotonic()
    lab.ssh(host, f"TF_CPP_MIN_LOG_LEVEL=3 {VENV}/bin/python -c 'import tensorflow, tf_keras'", timeout=300)
    times["import"] = time.monotonic() - t
    times["total"] = times["copy"] + times["pip"] + times["import"]
    return times


def host_disk_mb(lab: Lab, host: str) -> float:
    return size_bytes(lab.paths.host_dir(host) / "upper") / 1e6


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(dir=DEFAULT_DEST.parent) as tmp:
        t = time.monotonic()
        build(dest=Path(tmp) / "wheelhouse", force=True)
        cold = time.monotonic() - t
    build()  # the cached one the lab uses
    wheel_mb = size_bytes(DEFAULT_DEST) / 1e6
    with Lab(slots=("chief", "worker", "worker", "worker"), name="binst", names=NAMES) as lab:
        one = install(lab, NAMES[0], DEFAULT_DEST)
        t = time.monotonic()
        with ThreadPoolExecutor(max_workers=3) as pool:
            three = list(pool.map(lambda h: install(lab, h, DEFAULT_DEST), NAMES[1:]))
        three_wall = time.monotonic() - t
        disk = host_disk_mb(lab, NAMES[0])
        venv = float(lab.ssh(NAMES[0], f"du -sm {VENV}").stdout.split()[0])
    pips = ", ".join(f"{r['pip']:.1f}" for r in three)
    print(f"wheelhouse build (cold pip download): {cold:.1f} s, {wheel_mb:.0f} MB")
    print("install on 1 host: copy {copy:.1f} s + pip {pip:.1f} s + first import {import:.1f} s "
          "= {total:.1f} s".format(**one))
    print(f"install on 3 hosts at once: {three_wall:.1f} s wall "
          f"(per host pip {pips} s)")
    print(f"ratio 3 hosts / 1 host: {three_wall / one['total']:.2f}x")
    print(f"disk per host: {disk:.0f} MB (venv {venv:.0f} MB + wheelhouse {wheel_mb:.0f} MB + the rest)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
