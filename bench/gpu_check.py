"""GPU check (issue 21): does CUDA live in the job's GPU unit? For a GPU machine when one is lent (under 5 minutes).

    python -m bench.gpu_check [--efa] [--python PY] [--user nobody] [--json OUT]
    python -m bench.gpu_check --print-properties [--efa]     # the unit's properties, one per line (no GPU needed)

Renders the GPU unit's sandbox from the tf_job role's own lists (roles/tf_job/vars/main.yml: ``_tf_job_sandbox_base``
+ ``_tf_job_sandbox_gpu`` [+ ``_tf_job_sandbox_efa``], the role's own composition; tests/unit/playbooks/
test_gpu_check.py proves it equals the role's rendered ``_tf_job_sandbox``), gives the job a writable home as the
role does, and runs a probe under them with ``systemd-run --pipe --wait --collect -p ...`` as ``--user``: it reads
``/proc/driver/nvidia``, opens each NVIDIA node, reads the memlock limit, writes HOME's caches, then creates a CUDA
context and runs a matmul + reduce_sum placed on each GPU with TensorFlow (``--python`` must import it; without
TensorFlow it creates a context through libcuda's driver API and says so). It prints what it sees and reports each
row of docs/jobs.md's table "What CUDA needs" (GPU column, or GPU+EFA) as seen, not seen, or not applicable here.
Exit 0 when every applicable row is seen; 1 otherwise. Without a GPU it says "no GPU here" and exits 0. Where
systemd is not the service manager it runs the probe without the sandbox and says so (rows then read "unsandboxed").
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ROLE_VARS = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster/roles/tf_job/vars/main.yml"
DOCS = REPO / "docs/jobs.md"
TIMEOUT_S = 240

# Runs inside the sandbox: one JSON line of observations.
PROBE = r'''
import ctypes, glob, json, os, resource, sys
seen = {}
def try_open(path):
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC)); return "ok"
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror}"
try:
    with open("/proc/driver/nvidia/version") as f:
        seen["proc_driver"] = "ok: " + f.readline().strip()[:120]
except OSError as e:
    seen["proc_driver"] = f"{type(e).__name__}: {e.strerror}"
seen["proc_uvm"] = "ok" if os.path.isdir("/proc/driver/nvidia-uvm") else "absent"
seen["proc_other_pid"] = "visible" if os.path.isdir("/proc/1") else "hidden"
seen["nodes"] = {p: try_open(p) for p in sorted(glob.glob("/dev/nvidia*")) if not os.path.isdir(p)}
seen["caps"] = {p: try_open(p) for p in sorted(glob.glob("/dev/nvidia-caps/*"))}
seen["uverbs"] = {p: try_open(p) for p in sorted(glob.glob("/dev/infiniband/uverbs*"))}
seen["tun"] = try_open("/dev/net/tun") if os.path.exists("/dev/net/tun") else "absent"
soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
seen["memlock"] = "infinity" if soft == resource.RLIM_INFINITY else str(soft)
home = {}
for name in ("HOME", "XDG_CACHE_HOME", "KERAS_HOME", "TFDS_DATA_DIR", "HF_HOME", "MPLCONFIGDIR", "CUDA_CACHE_PATH"):
    path = os.environ.get(name, "")
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, ".probe"), "w") as f:
            f.write("x")
        home[name] = "ok"
    except OSError as e:
        home[name] = f"{path}: {e.strerror}"
seen["home"] = home
try:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_soft_device_placement(False)
    ops = []
    for i in range(len(gpus)):
        with tf.device(f"/GPU:{i}"):
            a = tf.random.stateless_uniform((256, 256), seed=(i, 1))
            total = tf.reduce_sum(tf.matmul(a, a))
        ops.append(total.device)
    seen["cuda"] = {"via": "tensorflow " + tf.__version__, "gpus": len(gpus), "ops_on": ops}
except ImportError as e:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        n, dev, ctx, ptr = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
        codes = [cuda.cuInit(0), cuda.cuDeviceGetCount(ctypes.byref(n))]
        ops = []
        for i in range(n.value):
            codes += [cuda.cuDeviceGet(ctypes.byref(dev), i), cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev),
                      cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))]
            if not any(codes):
                ops.append(f"GPU:{i} context+alloc")
            cuda.cuMemFree_v2(ptr); cuda.cuCtxDestroy_v2(ctx)
        seen["cuda"] = {"via": f"libcuda driver API (no TensorFlow: {e})", "gpus": n.value, "ops_on": ops,
                        "codes": codes}
    except OSError as e2:
        seen["cuda"] = {"via": "none", "error": str(e2), "gpus": 0, "ops_on": []}
except Exception as e:
    seen["cuda"] = {"via": "tensorflow", "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                    "gpus": -1, "ops_on": []}
print(json.dumps(seen))
'''


def role_lists(path: Path = ROLE_VARS) -> dict[str, list[str]]:
    """The role's static sandbox lists (plain YAML lists in its vars)."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {name: [str(p) for p in data[f"_tf_job_sandbox_{name}"]] for name in ("base", "cpu", "gpu", "efa")}


def unit_properties(gpus: int, efa: bool, lists: dict[str, list[str]] | None = None) -> list[str]:
    """The unit's sandbox as the role composes it (``_tf_job_sandbox``, without tf_job_sandbox_extra)."""
    lists = lists or role_lists()
    props = lists["base"] + (lists["gpu"] if gpus > 0 else lists["cpu"]) + (lists["efa"] if efa and gpus > 0 else [])
    return list(dict.fromkeys(props))  # the role's `unique`


def docs_table(path: Path = DOCS) -> dict[str, set[str]]:
    """{column: the properties docs/jobs.md's "What CUDA needs" table marks yes}."""
    text = path.read_text(encoding="utf-8")
    block = text.split("<!-- gpu-unit-table -->", 1)[1].split("<!-- /gpu-unit-table -->", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().splitlines()]
    header = rows[0]
    columns: dict[str, set[str]] = {name: set() for name in header[1:4]}
    for row in rows[2:]:
        if row and row[0].startswith("`"):
            for name, cell in zip(header[1:4], row[1:4], strict=True):
                if cell == "yes":
                    columns[name].add(row[0].strip("`"))
    return columns


def has_gpu() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/proc/driver/nvidia/version")


def proc_devices(path: str = "/proc/devices") -> dict[str, int]:
    names: dict[str, int] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return names
    for line in lines[1:]:
        if not line.strip() or line.startswith("Block"):
            break
        major, _, name = line.strip().partition(" ")
        names[name.strip()] = int(major) if major.isdigit() else -1
    return names


def _opened(nodes: dict[str, str], want: list[str]) -> str:
    if not want:
        return "n/a"
    bad = [f"{p}: {nodes.get(p, 'missing')}" for p in want if nodes.get(p) != "ok"]
    return "seen" if not bad else "not seen (" + "; ".join(bad) + ")"


def report(seen: dict[str, Any], columns: set[str], classes: dict[str, int], sandboxed: bool) -> dict[str, str]:
    """Each table row of the column: seen / not seen (why) / n/a (why)."""
    nodes = seen.get("nodes", {})
    gpu_nodes = [p for p in nodes if p[len("/dev/nvidia"):].isdigit()]
    rows: dict[str, str] = {}
    for prop in sorted(columns):
        if prop == "ProcSubset=all":
            driver = str(seen.get("proc_driver", ""))
            rows[prop] = "seen" if driver.startswith("ok") else f"not seen ({driver})"
        elif prop == "DevicePolicy=closed":
            tun = str(seen.get("tun"))
            rows[prop] = ("n/a (no /dev/net/tun to try)" if tun == "absent" else
                          "seen (/dev/net/tun denied)" if "PermissionError" in tun else f"not seen (tun: {tun})")
        elif prop.startswith("DeviceAllow=char-"):
            rows[prop] = _class_row(prop.split()[0][len("DeviceAllow=char-"):], seen, classes, gpu_nodes)
        elif prop == "LimitMEMLOCK=infinity":
            rows[prop] = "seen" if seen.get("memlock") == "infinity" else f"not seen (memlock {seen.get('memlock')})"
        else:
            rows[prop] = "n/a (not observable from inside)"
    cuda = seen.get("cuda", {})
    rows["CUDA op on every GPU"] = ("seen ({} on {})".format(cuda.get("via"), ", ".join(cuda.get("ops_on", [])))
                                    if cuda.get("gpus", 0) > 0 and len(cuda.get("ops_on", [])) == cuda.get("gpus")
                                    else f"not seen ({cuda})")
    home = seen.get("home", {})
    rows["HOME and caches writable"] = "seen" if home and set(home.values()) == {"ok"} else f"not seen ({home})"
    if not sandboxed:
        rows = {k: f"unsandboxed: {v}" for k, v in rows.items()}
    return rows


def _class_row(name: str, seen: dict[str, Any], classes: dict[str, int], gpu_nodes: list[str]) -> str:
    nodes, major = seen.get("nodes", {}), classes.get(name)
    if major is None:
        return f"n/a (no class {name} in /proc/devices on this driver)"
    if name in ("nvidia-frontend", "nvidia"):
        return _opened(nodes, gpu_nodes + (["/dev/nvidiactl"] if name == "nvidia-frontend" else []))
    if name == "nvidiactl":
        return _opened(nodes, ["/dev/nvidiactl"])
    if name == "nvidia-uvm":
        return _opened(nodes, [p for p in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if p in nodes]
                       or ["/dev/nvidia-uvm"])
    if name == "nvidia-caps":
        return _opened(seen.get("caps", {}), list(seen.get("caps", {}))) if seen.get("caps") else "n/a (no MIG nodes)"
    if name == "infiniband_verbs":
        return _opened(seen.get("uverbs", {}), list(seen.get("uverbs", {}))) or "n/a"
    return "n/a"


def probe_argv(python: str, user: str, home: str, properties: list[str], sandboxed: bool) -> list[str]:
    from tfcluster.core.contract import JOB_HOME_ENV

    env = {name: os.path.join(home, rel) if rel else home for name, rel in JOB_HOME_ENV.items()}
    if not sandboxed:
        return ["env", *[f"{k}={v}" for k, v in env.items()], python, "-c", PROBE]
    props = [f"User={user}", f"ReadWritePaths={home}", *properties, *[f"Environment={k}={v}" for k, v in env.items()]]
    return ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec",
            *[arg for p in props for arg in ("-p", p)], "--", python, "-c", PROBE]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--efa", action="store_true", help="the GPU+EFA unit")
    parser.add_argument("--python", default=sys.executable, help="an interpreter with TensorFlow (the job's venv)")
    parser.add_argument("--user", default="nobody", help="the unit's User= (the job runs as tfcluster)")
    parser.add_argument("--json", type=Path, help="write the observations and the report here")
    parser.add_argument("--print-properties", action="store_true", help="print the unit's properties and exit")
    args = parser.parse_args(argv)
    properties = unit_properties(1, args.efa)
    if args.print_properties:
        print("\n".join(properties))
        return 0
    if not has_gpu():
        print("no GPU here (no /dev/nvidia[0-9]* and no /proc/driver/nvidia): nothing to check")
        return 0
    sandboxed = bool(shutil.which("systemd-run")) and os.path.isdir("/run/systemd/system") and os.geteuid() == 0
    if not sandboxed:
        print("systemd is not the service manager here (or not root): the probe runs WITHOUT the sandbox")
    column = "GPU+EFA" if args.efa else "GPU"
    with tempfile.TemporaryDirectory(prefix="tfcluster-gpu-check-") as tmp:
        home = os.path.join(tmp, "home")
        os.makedirs(home)
        os.chmod(tmp, 0o755)
        if sandboxed:
            shutil.chown(home, args.user)
        try:
            proc = subprocess.run(probe_argv(args.python, args.user, home, properties, sandboxed), capture_output=True,
                                  text=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            print(f"the probe ran past {TIMEOUT_S} s")
            return 1
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        print(f"the probe failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return 1
    seen = json.loads(lines[-1])
    rows = report(seen, docs_table()[column], proc_devices(), sandboxed)
    print(f"properties ({column}):\n  " + "\n  ".join(properties))
    print("seen inside:\n  " + json.dumps(seen, indent=1).replace("\n", "\n  "))
    print(f"docs/jobs.md, What CUDA needs ({column}):")
    for prop, verdict in rows.items():
        print(f"  {prop:42} {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"properties": properties, "seen": seen, "rows": rows}, indent=1) + "\n")
    return 0 if not any(v.startswith(("not seen", "unsandboxed: not seen")) for v in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
