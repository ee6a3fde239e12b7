"""Checks on a host before any task of a job starts: each returns a problem (text naming what and the fix) or None.

* the training port is free (``host:port``, ``[v6]:port`` or a bare IPv6 address with a port);
* the runtime imports the job's modules (``tensorflow``);
* the deployed release has the expected digest;
* files the job needs exist with their sha256 (the dataset);
* the job sees exactly the GPUs it declares and runs a small op on each (a CUDA context and a kernel, not only a
  device listing), as its own user under the unit's own sandbox (``systemd-run``);
* EFA: whether the host has ``/dev/infiniband/uverbs*`` and where the aws-ofi-nccl plugin lies (GPU units use it).

The import and GPU checks start TensorFlow (seconds): a passed check is remembered in a stamp under the run dir
(/run, so a reboot forgets it), keyed by what would change its answer (the runtime's installed distributions, the
boot, the sandbox, the driver), and not repeated while the key holds. Standard library only.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import socket
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.files import atomic_write_text, sha256_file, tree_digest

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "3"}
IMPORT_CODE = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
# Lists the GPUs, then creates a CUDA context on each and runs a small matmul there (soft placement off, so an op
# that cannot run on GPU i fails instead of running on the CPU); prints one JSON line.
GPU_CODE = """import json, os
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
import tensorflow as tf
gpus = tf.config.list_physical_devices('GPU')
tf.config.set_soft_device_placement(False)
ran, error = 0, ''
for i in range(len(gpus)):
    try:
        with tf.device(f'/GPU:{i}'):
            a = tf.random.stateless_uniform((256, 256), seed=(i, 1))
            total = tf.reduce_sum(tf.matmul(a, a))
        if not total.device.endswith(f'GPU:{i}') or not bool(tf.math.is_finite(total)):
            raise RuntimeError(f'the op ran on {total.device}')
        ran += 1
    except Exception as exc:
        error = f'GPU {i}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ""}'[:300]
        break
print(json.dumps({'gpus': len(gpus), 'ran': ran, 'error': error}))
"""
EFA_DEVICES = "/dev/infiniband/uverbs*"


def split_address(address: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``v6:port`` -> (host without brackets, port). Raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def port_problem(address: str) -> str | None:
    """None when the address's port can be bound here (SO_REUSEADDR, like a server after a restart)."""
    try:
        host, port = split_address(address)
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (ValueError, OSError) as error:
        return f"training address {address} cannot be used ({error}). Fix: give the host an address of this host"
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    except OSError as error:
        return (f"port {address} is not free ({error.strerror or error}): stop what listens there or pick another "
                "port")
    finally:
        sock.close()
    return None


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **QUIET_TF, **(env or {})}
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, env=full_env)


def import_problem(python: str, modules: Sequence[str], timeout: float = 300) -> str | None:
    if not modules:
        return None
    try:
        proc = _run([python, "-c", IMPORT_CODE, *modules], timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{python} cannot import {', '.join(modules)} ({error}). Fix: run site.yml to install the runtime"
    if proc.returncode == 0:
        return None
    return (f"{python} cannot import {', '.join(modules)} ({_last_line(proc.stderr)}). Fix: run site.yml (make train "
            "prepares the hosts) or check the venv")


def digest_problem(release_dir: str, expected: str) -> tuple[str | None, str | None]:
    """(the release's digest, problem)."""
    if not os.path.isdir(release_dir):
        return None, f"the trainer release {release_dir} is missing. Fix: run site.yml (tag trainer) on every host"
    digest = tree_digest(os.path.realpath(release_dir))
    if expected and digest != expected:
        return digest, (f"the deployed trainer ({release_dir}) has digest {digest[:12]}, expected {expected[:12]}. "
                        "Fix: re-run the trainer role (site.yml, tag trainer) on every host")
    return digest, None


def file_problems(files: Mapping[str, str]) -> list[str]:
    """Each file that is missing or whose sha256 differs from the wanted one ('' = any content)."""
    problems = []
    for path, want in sorted(files.items()):
        if not os.path.isfile(path):
            problems.append(f"{path} is missing. Fix: run site.yml to copy it")
        elif want and sha256_file(path) != want.lower():
            problems.append(f"{path} is corrupt (sha256 differs from {want[:12]}). Fix: run site.yml to copy it again")
    return problems


def gpu_check_argv(python: str, user: str | None, group: str | None, properties: Sequence[str]) -> list[str]:
    """The GPU listing as the job's user under its sandbox (``systemd-run``), or as we are (no user: local slots)."""
    code = [python, "-c", GPU_CODE]
    if not user:
        return code
    props = [f"User={user}", *([f"Group={group}"] if group else []), *properties]
    return ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec",
            *[arg for prop in props for arg in ("-p", prop)], "--", *code]


def gpu_problem(argv: Sequence[str], gpus: int, timeout: float = 300) -> tuple[int | None, str | None]:
    """(GPUs TensorFlow lists, problem): the job declared ``gpus`` and must see exactly that many."""
    try:
        proc = _run(argv, timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"the GPU check could not run ({error}). Fix: check systemd-run and the runtime"
    try:
        seen = int(json.loads(_last_line(proc.stdout))["gpus"])
    except (ValueError, KeyError, TypeError):
        return None, (f"the GPU check failed (exit {proc.returncode}: {_last_line(proc.stderr) or 'no output'}). "
                      "Fix: check the driver (nvidia-smi), the CUDA wheels of the runtime, or set tfcluster_gpus=0")
    if seen != gpus:
        return seen, (f"TensorFlow sees {seen} GPU(s) as the job's user in its sandbox, {gpus} declared. Fix: check "
                      "the driver (nvidia-smi) and the device nodes (/dev/nvidia*), install the runtime's CUDA wheels, "
                      f"or declare the GPUs this host has (tfcluster_gpus={seen})")
    return seen, op_problem(proc.stdout, seen)


def op_problem(stdout: str, seen: int) -> str | None:
    """A problem when the GPU check could list ``seen`` GPUs but not run its op on each of them."""
    try:
        answer = json.loads(_last_line(stdout))
        ran, error = int(answer.get("ran", seen)), str(answer.get("error") or "")
    except (ValueError, TypeError, AttributeError):
        return "the GPU check's answer is unreadable. Fix: run the check by hand (docs/jobs.md, The preflight)"
    if ran >= seen:
        return None
    return (f"TensorFlow lists {seen} GPU(s) but cannot run an op on GPU {ran} as the job's user in its sandbox "
            f"({error or 'no error text'}). Fix: check that nvidia-uvm is loaded and its nodes exist "
            "(systemctl status tfcluster.nvidia-uvm.service; ls -l /dev/nvidia-uvm*), that /proc/driver/nvidia is "
            "readable, and the driver (nvidia-smi); docs/jobs.md, What CUDA needs")


# --- EFA ------------------------------------------------------------------------------------------------------------
def efa_enabled(setting: str, devices: Sequence[str]) -> bool:
    """tf_job_efa: auto (the host has uverbs devices), true or false."""
    text = str(setting).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    return bool(devices)


def efa_facts(setting: str, plugin_dirs: Sequence[str], devices_glob: str = EFA_DEVICES) -> dict[str, Any]:
    """{enabled, devices, plugin_dir}: the uverbs nodes here and the first existing aws-ofi-nccl plugin dir."""
    devices = sorted(glob.glob(devices_glob))
    plugin = next((d for d in plugin_dirs if os.path.isdir(d)), "")
    return {"enabled": efa_enabled(setting, devices), "devices": devices, "plugin_dir": plugin}


# --- facts ----------------------------------------------------------------------------------------------------------
def default_interface(route_table: str = "/proc/net/route") -> str | None:
    """The interface of the default IPv4 route (NCCL_SOCKET_IFNAME's default), lowest metric first."""
    best: tuple[int, str] | None = None
    try:
        with open(route_table, encoding="utf-8") as handle:
            rows = [line.split() for line in handle.read().splitlines()[1:]]
    except OSError:
        return None
    for row in rows:
        if len(row) > 6 and row[1] == "00000000" and row[7:8] == ["00000000"]:
            metric = int(row[6]) if row[6].isascii() and row[6].isdigit() else 0
            if best is None or metric < best[0]:
                best = (metric, row[0])
    return best[1] if best else None


def systemd_booted() -> bool:
    """sd_booted(): systemd is the service manager of this host."""
    return os.path.isdir("/run/systemd/system")


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


# --- remembered checks ----------------------------------------------------------------------------------------------
def runtime_fingerprint(python: str) -> list[str]:
    """What an import check's answer depends on: the interpreter and the distributions installed next to it."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    dists = sorted(os.path.basename(p) for p in glob.glob(os.path.join(venv, "lib", "python*", "site-packages",
                                                                      "*.dist-info")))
    return [os.path.realpath(python), *dists]


def stamp_path(stamp_dir: str, kind: str, key: Any) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return os.path.join(stamp_dir, f"{kind}-{digest}.ok")


def remembered(stamp_dir: str | None, kind: str, key: Any) -> bool:
    return bool(stamp_dir) and os.path.isfile(stamp_path(str(stamp_dir), kind, key))


def remember(stamp_dir: str | None, kind: str, key: Any) -> None:
    if stamp_dir:
        atomic_write_text(stamp_path(stamp_dir, kind, key), json.dumps(key, sort_keys=True) + "\n")
