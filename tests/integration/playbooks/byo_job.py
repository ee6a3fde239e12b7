"""A bring-your-own training script for the playbook tests: no TensorFlow, same contract.

Reads TF_CONFIG, binds its own address (as a TensorFlow server would), writes status.json progress into
$TFCLUSTER_MODEL_DIR every step; the chief writes export/ and metrics.json at the end. Options:
--steps N, --step-seconds S, --forever (never finishes; for fail-fast tests), --exit-code N (exit with it at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-seconds", type=float, default=0.3)
    parser.add_argument("--forever", action="store_true")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    tf_config = json.loads(os.environ["TF_CONFIG"])
    task = tf_config["task"]
    address = tf_config["cluster"][task["type"]][task["index"]]
    host, port = address.rsplit(":", 1)
    server = socket.socket()
    server.bind((host, int(port)))
    server.listen()
    model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
    is_chief = task["type"] == "chief" or (task["type"] == "worker" and task["index"] == 0
                                           and "chief" not in tf_config["cluster"])
    print(f"byo_job {task['type']}:{task['index']} chief={is_chief} model_dir={model_dir}", flush=True)
    step = 0
    while args.forever or step < args.steps:
        step += 1
        status = {"epoch": 1, "epochs": 1, "step": step, "steps_per_epoch": args.steps, "loss": 1.0 / step,
                  "examples_per_sec": 1000.0 * step}
        tmp = os.path.join(model_dir, ".status.tmp")
        with open(tmp, "w") as handle:
            json.dump(status, handle)
        os.replace(tmp, os.path.join(model_dir, "status.json"))
        print(f"step {step}", flush=True)
        time.sleep(args.step_seconds)
    if is_chief:
        os.makedirs(os.path.join(model_dir, "export"), exist_ok=True)
        with open(os.path.join(model_dir, "export", "model.txt"), "w") as handle:
            handle.write("weights\n")
        with open(os.path.join(model_dir, "metrics.json"), "w") as handle:
            json.dump({"history": {"loss": [1.0, 0.5], "accuracy": [0.5, 0.9]}, "steps": step}, handle)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
