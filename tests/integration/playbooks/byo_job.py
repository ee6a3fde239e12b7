"""A bring-your-own training script for the playbook tests: no TensorFlow, same contract.

Reads TF_CONFIG, binds its own address (as a TensorFlow server would), writes status.json progress into
$TFCLUSTER_MODEL_DIR every step; the chief writes export/ and metrics.json at the end. Options:
--steps N, --step-seconds S, --forever (never finishes; for fail-fast tests), --exit-code N (exit with it at the end),
--write-nothing (no status.json, no export: a script that saves nothing), --echo-args FILE (write its own argv and
environment there first), --raise (fail with a Python exception after a dump of numbers, like TensorFlow's),
--backup-on-sigterm (on SIGTERM: say it saves a backup and exit 3, like the trainer at a deadline).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time

PREEMPTED = 3  # the trainer's "stopped after a backup" (contract.EXIT_PREEMPTED; this script imports nothing of ours)


def parse() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-seconds", type=float, default=0.3)
    parser.add_argument("--forever", action="store_true")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--write-nothing", action="store_true")
    parser.add_argument("--echo-args", default=None)
    parser.add_argument("--raise", dest="fail", action="store_true")
    parser.add_argument("--backup-on-sigterm", action="store_true")
    return parser.parse_known_args()


def write_status(model_dir: str, step: int, steps: int) -> None:
    status = {"epoch": 1, "epochs": 1, "step": step, "steps_per_epoch": steps, "loss": 1.0 / step,
              "examples_per_sec": 1000.0 * step}
    tmp = os.path.join(model_dir, ".status.tmp")
    with open(tmp, "w") as handle:
        json.dump(status, handle)
    os.replace(tmp, os.path.join(model_dir, "status.json"))


def on_sigterm(_signum: int, _frame: object) -> None:
    print("SIGTERM: saving a backup, then exit 3", flush=True)
    sys.exit(PREEMPTED)


def main() -> int:
    args, rest = parse()
    if args.echo_args:
        with open(args.echo_args, "w") as handle:
            json.dump({"argv": sys.argv[1:], "rest": rest, "env": dict(os.environ)}, handle)
    if args.backup_on_sigterm:
        signal.signal(signal.SIGTERM, on_sigterm)
    tf_config = json.loads(os.environ["TF_CONFIG"])
    task = tf_config["task"]
    address = tf_config["cluster"][task["type"]][task["index"]]
    host, port = address.rsplit(":", 1)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: a previous job's TIME_WAIT is fine
    server.bind((host, int(port)))
    server.listen()
    model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
    is_chief = task["type"] == "chief" or (task["type"] == "worker" and task["index"] == 0
                                           and "chief" not in tf_config["cluster"])
    print(f"byo_job {task['type']}:{task['index']} chief={is_chief} model_dir={model_dir}", flush=True)
    step = 0
    while args.forever or step < args.steps:
        step += 1
        if not args.write_nothing:
            write_status(model_dir, step, args.steps)
        print(f"step {step}", flush=True)
        time.sleep(args.step_seconds)
    if args.fail:
        print("Traceback (most recent call last):", flush=True)
        print(f'  File "{os.path.abspath(__file__)}", line 1, in main', flush=True)
        print("    model.fit(dataset)", flush=True)
        print("ValueError: Unrecognized type PerReplica: PerReplica:{", flush=True)
        for i in range(200):
            print(f"  [{i}. 0. 0. 0.]", flush=True)
        return 1
    if is_chief and not args.write_nothing:
        os.makedirs(os.path.join(model_dir, "export"), exist_ok=True)
        with open(os.path.join(model_dir, "export", "model.txt"), "w") as handle:
            handle.write("weights\n")
        with open(os.path.join(model_dir, "metrics.json"), "w") as handle:
            json.dump({"history": {"loss": [1.0, 0.5], "accuracy": [0.5, 0.9]}, "steps": step}, handle)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
