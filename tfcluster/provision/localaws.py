"""The emulated AWS endpoint for CLUSTER=local: one moto_server on 127.0.0.1, started once, stopped by PID.

Usage:
    python -m tfcluster.provision.localaws start  [--port 4566]   # idempotent: reuses the running one; prints the URL
    python -m tfcluster.provision.localaws status                 # JSON; exit 0 when running, 3 when not
    python -m tfcluster.provision.localaws stop                   # stops only the PID recorded by `start`
    python -m tfcluster.provision.localaws count --cluster NAME   # live instances tagged tfcluster:cluster=NAME

State lives in .cache/localaws/ (override with TFCLUSTER_LOCALAWS_DIR): moto.pid, moto.json (pid, port,
endpoint), moto.log. The port comes from --port, else TFCLUSTER_LOCALAWS_PORT, else 4566. Everything in the
emulator lives in moto's memory: stopping it forgets every emulated resource.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster.core.contract import TAG_KEYS
from tfcluster.core.paths import REPO_ROOT

LOG = logging.getLogger("localaws")
DEFAULT_PORT = 4566
HOST = "127.0.0.1"
CLUSTER_TAG = TAG_KEYS["cluster"]
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}


class LocalAwsError(RuntimeError):
    """The endpoint could not be started, reached or stopped; the message says why."""


@dataclass(frozen=True)
class Endpoint:
    pid: int
    port: int

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def state_dir(root: Path | None = None) -> Path:
    override = os.environ.get("TFCLUSTER_LOCALAWS_DIR")
    if override:
        return Path(override)
    base = root or REPO_ROOT
    return base / ".cache" / "localaws"


def default_port() -> int:
    raw = os.environ.get("TFCLUSTER_LOCALAWS_PORT", str(DEFAULT_PORT))
    try:
        port = int(raw)
    except ValueError as exc:
        raise LocalAwsError(f"TFCLUSTER_LOCALAWS_PORT={raw!r} is not a port number") from exc
    if not 1024 <= port <= 65535:
        raise LocalAwsError(f"TFCLUSTER_LOCALAWS_PORT={port} must be from 1024 to 65535")
    return port


def moto_command(port: int) -> list[str]:
    """moto_server next to the running Python (the venv), else the module."""
    script = Path(sys.executable).parent / "moto_server"
    base = [str(script)] if script.is_file() else [sys.executable, "-m", "moto.server"]
    return [*base, "-H", HOST, "-p", str(port)]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def is_our_moto(pid: int, port: int) -> bool:
    """The recorded PID is still a moto_server on the recorded port (not a recycled PID)."""
    try:
        text = [part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    except OSError:  # no /proc (macOS): ask ps
        found = subprocess.run(["/bin/ps", "-o", "command=", "-p", str(pid)],
                               capture_output=True, text=True, check=False)
        text = found.stdout.split()
    return any("moto" in part for part in text) and str(port) in text


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def responds(url: str, timeout: float = 1.0) -> bool:
    """moto answers its own API (a dashboard path every version has)."""
    try:
        with urllib.request.urlopen(f"{url}/moto-api/", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def read_state(directory: Path) -> Endpoint | None:
    try:
        data = json.loads((directory / "moto.json").read_text())
        return Endpoint(pid=int(data["pid"]), port=int(data["port"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(directory: Path, endpoint: Endpoint) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "moto.pid").write_text(f"{endpoint.pid}\n")
    (directory / "moto.json").write_text(json.dumps({"pid": endpoint.pid, "port": endpoint.port,
                                                     "endpoint": endpoint.url}, sort_keys=True) + "\n")


def clear_state(directory: Path) -> None:
    for name in ("moto.pid", "moto.json"):
        (directory / name).unlink(missing_ok=True)


def recorded_alive(directory: Path) -> Endpoint | None:
    """The endpoint recorded in `directory` when its process is alive and still our moto_server."""
    endpoint = read_state(directory)
    if endpoint is None or not pid_alive(endpoint.pid) or not is_our_moto(endpoint.pid, endpoint.port):
        return None
    return endpoint


def running(directory: Path, timeout: float = 3.0) -> Endpoint | None:
    """The recorded endpoint when it is alive, ours and answering; else None."""
    endpoint = recorded_alive(directory)
    return endpoint if endpoint is not None and responds(endpoint.url, timeout=timeout) else None


def wait_ready(endpoint: Endpoint, timeout: float, process: subprocess.Popen[bytes] | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        if responds(endpoint.url, timeout=1.0):
            return True
        time.sleep(0.2)
    return False


def start(directory: Path, port: int, timeout: float = 30.0, *, command: list[str] | None = None,
          env: dict[str, str] | None = None) -> Endpoint:
    """Start moto_server once; a second call returns the running one. `command` (argv before `-H HOST -p PORT`) and
    `env` start another moto entry point (the AWS twin's, lab/twin_moto.py, with MOTO_AMIS_PATH)."""
    current = recorded_alive(directory)
    if current is not None:
        if not wait_ready(current, timeout):
            raise LocalAwsError(f"the recorded endpoint (pid {current.pid}) does not answer on {current.url}. "
                                "Fix: `python -m tfcluster.provision.localaws stop`, then start again")
        if current.port != port:
            LOG.info("endpoint already running on port %d (asked for %d); reusing it", current.port, port)
        return current
    stale = read_state(directory)
    if stale is not None:
        LOG.info("clearing stale endpoint record (pid %d)", stale.pid)
        clear_state(directory)
    if port_in_use(port):
        raise LocalAwsError(f"127.0.0.1:{port} is taken by another process. Fix: stop it, or pick a free port "
                            "with TFCLUSTER_LOCALAWS_PORT=NNNN")
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "moto.log"
    with log_path.open("ab") as log:
        argv = [*command, "-H", HOST, "-p", str(port)] if command else moto_command(port)
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                   start_new_session=True, close_fds=True)
    endpoint = Endpoint(pid=process.pid, port=port)
    write_state(directory, endpoint)
    if wait_ready(endpoint, timeout, process):
        LOG.info("emulated AWS endpoint %s (pid %d, log %s)", endpoint.url, endpoint.pid, log_path)
        return endpoint
    if process.poll() is not None:
        clear_state(directory)
        raise LocalAwsError(f"moto_server exited with {process.returncode}; see {log_path}")
    stop(directory)
    raise LocalAwsError(f"moto_server did not answer on {endpoint.url} within {timeout:.0f} s; see {log_path}")


def stop(directory: Path, timeout: float = 10.0) -> bool:
    """Stop the recorded moto_server (only that PID). Returns whether one was stopped."""
    endpoint = read_state(directory)
    if endpoint is None:
        return False
    stopped = False
    if pid_alive(endpoint.pid) and is_our_moto(endpoint.pid, endpoint.port):
        os.kill(endpoint.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(endpoint.pid) and time.monotonic() < deadline:
            _reap(endpoint.pid)
            time.sleep(0.1)
        if pid_alive(endpoint.pid):
            os.kill(endpoint.pid, signal.SIGKILL)
            _reap(endpoint.pid)
        stopped = True
        LOG.info("stopped emulated AWS endpoint (pid %d)", endpoint.pid)
    clear_state(directory)
    return stopped


def _reap(pid: int) -> None:
    """Collect the exit status when the endpoint is our own child (tests start and stop in one process)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def ec2_client(url: str) -> Any:
    import boto3

    return boto3.client("ec2", endpoint_url=url, region_name=DUMMY_CREDENTIALS["AWS_REGION"],
                        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


def live_instances(client: Any, cluster: str) -> list[dict[str, Any]]:
    """Instances tagged tfcluster:cluster=cluster that are not terminated."""
    filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
               {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
    found: list[dict[str, Any]] = []
    for page in client.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            found.extend(reservation["Instances"])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    start_p = sub.add_parser("start", help="start moto_server once (prints the endpoint URL)")
    start_p.add_argument("--port", type=int, default=None)
    sub.add_parser("status", help="JSON status; exit 0 running, 3 not running")
    sub.add_parser("stop", help="stop the recorded moto_server")
    count_p = sub.add_parser("count", help="print the number of live instances of a cluster")
    count_p.add_argument("--cluster", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[localaws] %(message)s")
    directory = state_dir()
    try:
        if args.command == "start":
            print(start(directory, args.port or default_port()).url)
        elif args.command == "status":
            endpoint = running(directory)
            print(json.dumps({"running": endpoint is not None, "pid": endpoint.pid if endpoint else None,
                              "endpoint": endpoint.url if endpoint else None}, sort_keys=True))
            return 0 if endpoint else 3
        elif args.command == "stop":
            stop(directory)
        else:
            endpoint = running(directory)
            if endpoint is None:
                raise LocalAwsError("the emulated endpoint is not running: `python -m tfcluster.provision.localaws "
                                    "start`")
            print(len(live_instances(ec2_client(endpoint.url), args.cluster)))
    except LocalAwsError as exc:
        LOG.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
