"""One lab host's processes on the control machine: systemd-nspawn under a tiny sh supervisor in its own cgroup
(``/sys/fs/cgroup/{systemd,unified}/tfcluster-lab/LAB/HOST``, and the lab's cpu group: lab/system.py), booted again
after an in-guest reboot (exit 133), powered off with SIGTERM, killed only when it does not go."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time

from lab import system
from lab.config import LabError, LabHost, LabSpec
from lab.paths import LabPaths

log = logging.getLogger(__name__)

STOP_TIMEOUT = 30.0  # seconds for a clean poweroff before the host's processes are killed
NSPAWN_REBOOTED = 133  # systemd-nspawn's exit status when the guest rebooted (the supervisor boots it again)

# The supervisor: joins the host's cgroups, runs systemd-nspawn, boots it again after an in-guest reboot, and on
# SIGTERM passes SIGTERM to systemd-nspawn (a clean poweroff of the guest) and waits for it. A bastion's front link
# (TFCLAB_ATTACH="VETH BRIDGE") goes into the front bridge each time nspawn has made it.
SUPERVISOR = r"""
set -u
for cg in $TFCLAB_CGROUPS; do echo $$ > "$cg/cgroup.procs" || exit 90; done
stop=0
child=
trap 'stop=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM INT HUP
while :; do
  "$@" &
  child=$!
  echo "$child" > "$TFCLAB_PIDFILE"
  if [ -n "$TFCLAB_ATTACH" ]; then
    n=0
    until ip link set ${TFCLAB_ATTACH%% *} master ${TFCLAB_ATTACH#* } up 2>/dev/null || [ $n -ge 300 ]; do
      sleep 0.1; n=$((n+1)); done
  fi
  [ "$stop" = 1 ] && kill -TERM "$child" 2>/dev/null
  rc=0; wait "$child" || rc=$?
  while kill -0 "$child" 2>/dev/null; do rc=0; wait "$child" || rc=$?; done
  echo "$(date +%s) nspawn exited $rc" >> "$TFCLAB_BOOTLOG"
  [ "$stop" = 1 ] && exit 0
  [ "$rc" = 133 ] || exit "$rc"
done
"""


def nspawn_argv(paths: LabPaths, spec: LabSpec, host: LabHost) -> list[str]:
    argv = ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit",
            f"--network-bridge={spec.bridge}", "--resolv-conf=delete", "--link-journal=no",
            "--console=read-only", "-D", str(paths.merged(host.name)), "-M", host.machine_name]
    argv += [f"--bind-ro={path}" for path in spec.bind_ro]
    argv += [f"--bind={entry}" for entry in spec.bind]
    if host.front_address is not None:
        argv.append(f"--network-veth-extra={host.front_veth}:front0")
    return argv


def boot(paths: LabPaths, spec: LabSpec, host: LabHost) -> subprocess.Popen[bytes]:
    groups = system.lab_cgroups(paths.lab, host.name)
    for g in groups:
        g.mkdir(parents=True, exist_ok=True)
    groups += system.cpu_join_groups(paths.lab, host.name)  # the lab's CPU limit and weight (Lab.limit_cpu) hold it too
    env = {**os.environ, "TFCLAB_CGROUPS": " ".join(map(str, groups)),
           "TFCLAB_PIDFILE": str(paths.pidfile(host.name)),
           "TFCLAB_BOOTLOG": str(paths.bootlog(host.name)),
           "TFCLAB_ATTACH": f"{host.front_veth} {spec.front_bridge}" if host.front_address else ""}
    with open(paths.log(host.name), "ab") as out:
        return subprocess.Popen(
            ["/bin/sh", "-c", SUPERVISOR, f"tfclab-{paths.lab}-{host.name}", *nspawn_argv(paths, spec, host)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def signal_host(paths: LabPaths, host: str) -> None:
    """SIGTERM the host's supervisor (it passes it to systemd-nspawn: a clean poweroff of the guest)."""
    groups = system.lab_cgroups(paths.lab, host)
    # The sh supervisor sits at the top of the host's cgroup; systemd-nspawn moves itself into supervisor/
    # and the guest into payload/.
    targets = system.live(set().union(*(system.cgroup_pids(g, recursive=False) for g in groups)))
    if not targets:  # the supervisor died: signal systemd-nspawn itself
        targets = system.live(set().union(*(system.cgroup_pids(g / "supervisor") for g in groups)))
    system.signal_pids(targets, signal.SIGTERM)


def stop_host(paths: LabPaths, host: str, proc: subprocess.Popen[bytes] | None, grace: float = STOP_TIMEOUT) -> None:
    """Wait for the host to power off (kill what is left after ``grace`` seconds; 0: at once, a pulled plug), then
    remove its cgroup+mount."""
    groups = system.lab_cgroups(paths.lab, host)

    def pids() -> set[int]:
        return set().union(*(system.cgroup_pids(g) for g in groups))

    if not system.wait_gone(pids, grace):
        if grace > 0:
            log.warning("host %s did not power off within %.0f s; killing its processes", host, grace)
        for _ in range(50):
            left = system.live(pids())
            if not left:
                break
            system.signal_pids(left, signal.SIGKILL)
            time.sleep(0.1)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    left = system.live(pids())
    if left:
        raise LabError(f"host {host}: processes {sorted(left)} survived SIGKILL")
    for g in groups:
        system.remove_cgroup(g)
    system.unmount_all(paths.host_dir(host))


def alive(paths: LabPaths, name: str, proc: subprocess.Popen[bytes] | None) -> bool:
    """Is the host's supervisor (ours, or one another process started) still running?"""
    if proc is not None:
        return proc.poll() is None
    return bool(system.live(set().union(*(system.cgroup_pids(g) for g in system.lab_cgroups(paths.lab, name)))))
