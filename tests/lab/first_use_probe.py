"""A SCRIPT job for tests/lab/test_host_first_use.py: what a program sees and may write inside the job's unit.

Writes $TFCLUSTER_MODEL_DIR/probe.json (or the path in argv[1]): each home variable's directory writable or the
error, the S3 dataset cache writable, /proc as ProcSubset= leaves it (/proc/cpuinfo is not a process directory),
/proc/driver, the memlock limit, the user. No TensorFlow: it starts in a second.
"""

import json
import os
import pwd
import resource
import sys

NAMES = ("HOME", "XDG_CACHE_HOME", "KERAS_HOME", "TFDS_DATA_DIR", "HF_HOME", "MPLCONFIGDIR", "CUDA_CACHE_PATH")


def writable(path: str) -> str:
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, ".first-use"), "w") as handle:
            handle.write("ok\n")
        return "ok"
    except OSError as error:
        return f"{path}: {error.strerror}"


seen = {
    "user": pwd.getpwuid(os.getuid()).pw_name,
    "env": {name: os.environ.get(name, "") for name in NAMES},
    "home": {name: writable(os.environ.get(name, "/nonexistent")) for name in NAMES},
    "s3_cache": writable(os.path.join(os.environ.get("TFCLUSTER_DATASETS", "/nonexistent"), "s3", "probe-bucket")),
    "proc_cpuinfo": os.path.isfile("/proc/cpuinfo"),
    "proc_self": os.path.isdir(f"/proc/{os.getpid()}"),
    "proc_driver": os.path.isdir("/proc/driver"),
    "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK)[0],
    "keras_cache": sorted(os.listdir(os.path.join(os.environ.get("KERAS_HOME", "/nonexistent"), "datasets")))
    if os.path.isdir(os.path.join(os.environ.get("KERAS_HOME", "/nonexistent"), "datasets")) else None,
}
target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ["TFCLUSTER_MODEL_DIR"], "probe.json")
with open(target, "w") as handle:
    json.dump(seen, handle)
print(json.dumps(seen))
