"""The local slots' layout: each task pinned to one core (round robin, as tf_job_cpu_affinity pins them) against the
same tasks unpinned, for MultiWorkerMirrored (2 workers) and ParameterServer (chief + 1 ps + 2 workers); and the
ParameterServer job pinned WITHOUT the inter-op floor (TF_NUM_INTEROP_THREADS=1, TensorFlow's own size on one
core), which hangs at its first step (issue 36: tfcluster/host/tfthreads.py). Then, with ``--make``, the time from
`make train CLUSTER=local STRATEGY=parameter_server` to the chief's first step, on a local cluster of its own.

Prints steady examples/s (the chief's metrics.json: the epochs after the first), the ratio pinned / unpinned, and
each run's start-up marks. One run per configuration by default (``--repeats`` for medians); not a timed test.

    .venv/bin/python -m bench.local_slots [--epochs 3] [--steps 300] [--repeats 1] [--hang-after 60] [--make]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import emit, free_ports

REPO = Path(__file__).resolve().parents[1]
LAYOUTS: dict[str, dict[str, int]] = {"multi_worker_mirrored": {"worker": 2},
                                      "parameter_server": {"chief": 1, "ps": 1, "worker": 2}}


def run_layout(tasks: dict[str, int], *, pinned: bool, env_extra: dict[str, str], epochs: int, steps: int,
               hang_after: float) -> dict[str, object]:
    """One job of trainer processes on loopback; its chief's metrics, or {"hung": seconds} when no task ended."""
    tmp = Path(tempfile.mkdtemp(prefix="tfcluster-slots-"))
    ports = iter(free_ports(sum(tasks.values())))
    cluster = {t: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for t, n in tasks.items()}
    names = [(t, i) for t in ("chief", "ps", "worker") for i in range(tasks.get(t, 0))]
    procs = []
    try:
        for ordinal, (task_type, index) in enumerate(names):
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO), "TFCLUSTER_SPOT_WATCH": "off",
                   "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}),
                   **env_extra}
            cmd = [sys.executable, "-m", "trainer", "--model-dir", str(tmp / "model"), "--epochs", str(epochs),
                   "--steps-per-epoch", str(steps), "--no-tensorboard", "--no-evaluate",
                   "--status-file", str(tmp / f"status-{task_type}-{index}.json")]
            if pinned:
                cmd = ["taskset", "-c", str(ordinal % (os.cpu_count() or 1)), *cmd]
            log = open(tmp / f"{task_type}-{index}.log", "w")  # noqa: SIM115 - closed below
            procs.append((subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT), log))
        started = time.monotonic()
        chief = procs[0][0]
        while chief.poll() is None and time.monotonic() - started < hang_after + 60 * epochs:
            time.sleep(0.5)
            status = _read(tmp / f"status-{names[0][0]}-0.json")
            if time.monotonic() - started > hang_after and not status.get("step") and not status.get("epochs_done"):
                return {"hung": round(time.monotonic() - started, 1), "state": status.get("state")}
        if chief.poll() is None or chief.returncode != 0:
            raise RuntimeError(f"the chief did not finish ({chief.returncode}):\n"
                               + (tmp / f"{names[0][0]}-0.log").read_text()[-3000:])
        return json.loads((tmp / "model" / "metrics.json").read_text())
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _read(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def pinning(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    for strategy, tasks in LAYOUTS.items():
        runs: dict[str, list[dict[str, object]]] = {"pinned": [], "unpinned": []}
        for _ in range(args.repeats):
            for variant, metrics in runs.items():
                metrics.append(run_layout(tasks, pinned=variant == "pinned", env_extra={}, epochs=args.epochs,
                                          steps=args.steps, hang_after=args.hang_after))
        rates = {v: statistics.median(float(m["examples_per_sec"]) for m in r) for v, r in runs.items()}  # type: ignore[arg-type]
        out[strategy] = {"pinned_examples_per_sec": round(rates["pinned"], 1),
                         "unpinned_examples_per_sec": round(rates["unpinned"], 1),
                         "pinned_over_unpinned": round(rates["pinned"] / rates["unpinned"], 2),
                         "first_step_s": {v: [m.get("startup_s", {}).get("first_step") for m in r]  # type: ignore[union-attr]
                                          for v, r in runs.items()}}
        print(f"{strategy:22s} pinned {rates['pinned']:8.0f} ex/s | unpinned {rates['unpinned']:8.0f} ex/s | "
              f"pinned/unpinned {rates['pinned'] / rates['unpinned']:.2f}")
    hung = run_layout(LAYOUTS["parameter_server"], pinned=True, env_extra={"TF_NUM_INTEROP_THREADS": "1"},
                      epochs=1, steps=args.steps, hang_after=args.hang_after)
    out["parameter_server_pinned_one_interop_thread"] = hung
    print("parameter_server pinned, TF_NUM_INTEROP_THREADS=1 (TensorFlow's own size on one core): "
          + (f"no step after {hung['hung']} s (hung)" if "hung" in hung else "finished"))
    return out


def first_step_through_make(epochs: int) -> dict[str, object]:
    """`make provision` then `make train CLUSTER=local STRATEGY=parameter_server`, on a cluster of its own: seconds
    from the train's start to the chief's first step (its status.json), and the stages' seconds."""
    tmp = Path(tempfile.mkdtemp(prefix="tfcluster-slots-make-"))
    shutil.copytree(REPO / "infra", tmp / "infra", ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    name = f"bench-ps-{uuid.uuid4().hex[:6]}"
    make_vars = [f"JOB={name}", f"TFCLUSTER_TF_DIR={tmp / 'infra' / 'local'}", f"TFCLUSTER_CLUSTER={name}",
                 "CLUSTER=local", "WORKERS=2", "STRATEGY=parameter_server"]
    env = {**os.environ, "TFCLUSTER_LOCALAWS_DIR": str(tmp / "localaws"),
           "TFCLUSTER_LOCALAWS_PORT": str(free_ports(1)[0])}
    status = REPO / ".cache" / "local" / name / "chief-0" / "var" / "lib" / "tfcluster" / name / "status.json"
    try:
        subprocess.run(["make", "provision", *make_vars], cwd=REPO, env=env, check=True, capture_output=True)
        started = time.monotonic()
        train = subprocess.Popen(["make", "train", f"EPOCHS={epochs}", *make_vars], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = None
        while train.poll() is None and first is None:
            data = _read(status)
            if data.get("step") or (isinstance(data.get("startup_s"), dict) and "first_step" in data["startup_s"]):
                first = round(time.monotonic() - started, 1)
            time.sleep(0.2)
        output, _ = train.communicate()
        print(output[-2500:])
        return {"make_train_to_first_step_s": first, "make_train_exit": train.returncode}
    finally:
        subprocess.run(["make", "destroy", "FORCE=1", *make_vars], cwd=REPO, env=env, capture_output=True, check=False)
        shutil.rmtree(REPO / ".cache" / "local" / name, ignore_errors=True)
        for job_dir in (REPO / "artifacts" / "local").glob(f"{name}*"):
            shutil.rmtree(job_dir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--hang-after", type=float, default=60.0, help="seconds without a step that count as a hang")
    p.add_argument("--make", action="store_true", help="also time `make train` to the first step (a local cluster)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not shutil.which("taskset"):
        print("taskset (util-linux) is needed to pin the tasks", file=sys.stderr)
        return 1
    result: dict[str, object] = {"cpus": os.cpu_count(), "load_average": list(os.getloadavg()),
                                 "pinning": pinning(args)}
    if args.make:
        result["make"] = first_step_through_make(1)
        print(f"make train -> the chief's first step: {result['make']['make_train_to_first_step_s']} s")  # type: ignore[index]
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
