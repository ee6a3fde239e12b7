"""The wait's poll of a host: one ``jobstatus status`` command per poll against one ``jobstatus serve`` session for
the whole wait (the wait plugin's Stream), in one run.

Both ask a running task (the process backend: a supervised ``sleep``) ``--polls`` times through a stand-in ssh that
runs the host's command on this machine (no network, no sshd: what is left is the Python start and imports the
session saves, and the status itself), with the host's own python (``/usr/bin/python3``), and print the CPU seconds
per poll of every process involved (the commands, and this process), and the ratio. One run; not a timed test.

    .venv/bin/python -m bench.wait_poll [--polls 40] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import emit
from tfcluster.host import jobspec, supervisor

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster/plugins/action/wait.py"
FAKE_SSH = '#!/bin/sh\nfor last; do :; done\nexec sh -c "$last"\n'  # ssh OPTIONS -- HOST COMMAND: COMMAND, here


def load_plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_wait_action", PLUGIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task(tmp: Path) -> str:
    """A running task of the process backend; the path of its spec."""
    (tmp / "env").write_text(jobspec.render_env_file({}))
    spec = {"name": "bench", "argv": ["/bin/sh", "-c", "sleep 600"], "env_file": str(tmp / "env"),
            "workdir": str(tmp), "run_dir": str(tmp / "run"), "log": str(tmp / "log"),
            "model_dir": str(tmp / "model"), "pythonpath": str(REPO)}
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def cpu() -> float:
    """CPU seconds of this process and of its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(polls: int, ask: Callable[[], dict[str, Any]], close: Callable[[], None]) -> dict[str, float]:
    before, began = cpu(), time.monotonic()
    for _ in range(polls):
        answer = ask()
        if "status" not in answer:
            raise RuntimeError(f"the poll failed: {answer}")
    close()  # the session's process is reaped here: its CPU counts
    return {"cpu_ms_per_poll": round((cpu() - before) * 1000 / polls, 1),
            "wall_ms_per_poll": round((time.monotonic() - began) * 1000 / polls, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--polls", type=int, default=40)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    wait = load_plugin()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "bin").mkdir()
        (tmp / "bin" / "ssh").write_text(FAKE_SSH)
        (tmp / "bin" / "ssh").chmod(0o755)
        os.environ["PATH"] = f"{tmp / 'bin'}:{os.environ['PATH']}"
        spec = task(tmp)
        supervisor.start(spec)
        try:
            target = {"slot": "worker:0", "spec": spec, "python": "/usr/bin/python3", "pythonpath": str(REPO),
                      "reach": {"name": "h", "connection": "ssh", "host": "h"}}
            oneshot = measure(args.polls, lambda: wait.poll(target, 20, 30), lambda: None)
            streams = wait.Streams()
            session = measure(args.polls, lambda: streams.poll(target, 20, 30), streams.close)
            if streams.oneshot:
                raise RuntimeError("the session fell back to a command per poll")
        finally:
            supervisor.stop(spec)
    result = {"polls": args.polls, "command_per_poll": oneshot, "one_session": session,
              "session_over_command_cpu": round(session["cpu_ms_per_poll"] / oneshot["cpu_ms_per_poll"], 3),
              "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    for name, run in (("a command per poll", oneshot), ("one session", session)):
        print(f"{name:18}: {run['cpu_ms_per_poll']:6.1f} ms CPU per poll  ({run['wall_ms_per_poll']:.1f} ms wall)")
    print(f"session / command : CPU {result['session_over_command_cpu']:.2f}x")
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
