"""Deploy area on real hosts (the prepared flow lab): the collector as on AWS (a non-root SSH user with sudo, a 0750
model dir owned by the job user), its refusals (a manifest linked to /etc/shadow, a file only root can read, a cap),
versioned copies; the firewall (only peers reach the training port; a forced re-run changes nothing); a host whose
sshd comes up late is waited for, one that never does is named; a prepared cluster's no-op run is one probe."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from lab.flows import MWMS_SLOTS, PS_SLOTS, TRAIN_PORT, Flows, render_hosts_file, wait_until
from tfcluster.core.files import verify_dir

# one of the two flow groups: its tests run in the one worker that boots its flow lab (tests/conftest.py)
pytestmark = [pytest.mark.xdist_group("flowlab"), pytest.mark.lab, pytest.mark.slow]

CHIEF = "f-chief"
SSH_USER = "ubuntu"


def hosts_file_as(flows: Flows, name: str, user: str) -> Path:
    """The MWMS host file with the chief reached as ``user`` (like the AWS Deep Learning AMI's `ubuntu`)."""
    text = render_hosts_file(flows.lab, MWMS_SLOTS, "lab-flow")
    head, _, rest = text.partition(f"  - name: {CHIEF}\n")
    block, sep, tail = rest.partition("  - name: ")
    path = flows.workdir / f"{name}.yml"
    path.write_text(head + f"  - name: {CHIEF}\n" + block.replace("ssh_user: root", f"ssh_user: {user}") + sep + tail)
    return path


@pytest.fixture(scope="module")
def ubuntu_chief(flow_lab: Flows) -> Path:
    """A login user with passwordless sudo on the chief, the lab's key; the host file that uses it."""
    flow_lab.lab.ssh(CHIEF, f"id {SSH_USER} >/dev/null 2>&1 || useradd -m -s /bin/bash {SSH_USER}; "
                            f"install -d -m 700 -o {SSH_USER} -g {SSH_USER} /home/{SSH_USER}/.ssh && "
                            f"install -m 600 -o {SSH_USER} -g {SSH_USER} /root/.ssh/authorized_keys "
                            f"/home/{SSH_USER}/.ssh/authorized_keys && "
                            f"echo '{SSH_USER} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/90-{SSH_USER} && "
                            f"chmod 440 /etc/sudoers.d/90-{SSH_USER}")
    return hosts_file_as(flow_lab, "chief-as-ubuntu", SSH_USER)


def write_model_dir(flows: Flows, job: str, files: dict[str, bytes]) -> str:
    """A finished model dir on the chief, 0750 and owned by the job user (as the trainer leaves it)."""
    src = flows.workdir / f"{job}-src-{time.monotonic_ns()}"
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    (src / "MANIFEST.sha256").write_text(
        "".join(f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in sorted(files.items())))
    (src / "DONE").write_text("{}\n")
    flows.lab.copy_to(CHIEF, src, "/tmp/")
    model_dir = flows.model_dir(job)
    flows.lab.ssh(CHIEF, f"rm -rf {model_dir} && mv /tmp/{src.name} {model_dir} && "
                         f"chown -R tfcluster:tfcluster {model_dir} && chmod 0750 {model_dir}")
    return model_dir


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_collector_reads_as_the_job_user_over_a_non_root_login(flow_lab: Flows, ubuntu_chief: Path) -> None:
    job = flow_lab.job("deploy-collect")
    files = {"export/model.bin": os.urandom(300_000), "metrics.json": b'{"epochs": 1}'}
    write_model_dir(flow_lab, job, files)
    # The login user cannot read the model dir itself: the collector must use sudo -n -u tfcluster.
    assert flow_lab.lab.ssh(CHIEF, f"su -s /bin/sh {SSH_USER} -c 'ls {flow_lab.model_dir(job)}'",
                            check=False).returncode != 0
    run = flow_lab.run("collect.yml", ubuntu_chief, job)
    assert run.returncode == 0, run.describe()
    root = flow_lab.artifacts(job)
    assert verify_dir(root / "current") == len(files)
    assert (root / "current" / "export/model.bin").read_bytes() == files["export/model.bin"]
    first = os.readlink(root / "current")

    # A re-collect of a changed model dir keeps the previous good copy.
    files["export/model.bin"] = os.urandom(1000)
    write_model_dir(flow_lab, job, files)
    again = flow_lab.run("collect.yml", ubuntu_chief, job)
    assert again.returncode == 0, again.describe()
    assert os.readlink(root / "current") != first and verify_dir(root / first) == len(files)

    # A cap: more than collector_max_bytes is refused, nothing written, the current copy stays.
    current = os.readlink(root / "current")
    files["export/model.bin"] = os.urandom(50_000)
    write_model_dir(flow_lab, job, files)
    capped = flow_lab.run("collect.yml", ubuntu_chief, job, {"collector_max_bytes": 10_000})
    assert capped.returncode != 0 and "collector_max_bytes=10,000" in capped.output
    assert os.readlink(root / "current") == current and leftovers(root) == []


def test_collector_never_reads_as_root_nor_through_a_link(flow_lab: Flows, ubuntu_chief: Path) -> None:
    job = flow_lab.job("deploy-refuse")
    model_dir = write_model_dir(flow_lab, job, {"a.bin": b"a" * 100})
    # Tried: a manifest linked to /etc/shadow echoed a line of it. Now it is refused unread.
    flow_lab.lab.ssh(CHIEF, f"mv {model_dir}/MANIFEST.sha256 /tmp/m && ln -s /etc/shadow {model_dir}/MANIFEST.sha256")
    run = flow_lab.run("collect.yml", ubuntu_chief, job)
    assert run.returncode != 0 and "without following a link" in run.output
    assert "root:" not in run.output and "$y$" not in run.output and "$6$" not in run.output
    # A listed file only root may read: the job user cannot read it, so the collection fails (it ran as tfcluster).
    flow_lab.lab.ssh(CHIEF, f"rm {model_dir}/MANIFEST.sha256 && mv /tmp/m {model_dir}/MANIFEST.sha256 && "
                            f"chown root:root {model_dir}/a.bin && chmod 600 {model_dir}/a.bin")
    denied = flow_lab.run("collect.yml", ubuntu_chief, job)
    assert denied.returncode != 0 and "a.bin" in denied.output
    assert not (flow_lab.artifacts(job) / "current").exists()


def test_collector_takes_no_linked_member_nor_a_name_with_an_escape(flow_lab: Flows, ubuntu_chief: Path) -> None:
    """The chief's model dir is data. Tried: names the chief answered were written unchecked (a `../` name or an
    absolute one left the staging dir). Now a listed symlink to /etc/shadow is refused unread, a listed name holding
    a terminal escape is refused and never printed raw, and nothing is written outside the artifacts dir."""
    job = flow_lab.job("deploy-names")
    escape = "\x1b]52;c;AAAA\x07"
    artifacts = flow_lab.artifacts(job).parent
    before = sorted(p.name for p in artifacts.iterdir()) if artifacts.exists() else []
    model_dir = write_model_dir(flow_lab, job, {"a.bin": b"a" * 100})
    line = f"{hashlib.sha256(b'x').hexdigest()}  shadow"
    flow_lab.lab.ssh(CHIEF, f"ln -s /etc/shadow {model_dir}/shadow && chown -h tfcluster:tfcluster {model_dir}/shadow "
                            f"&& echo '{line}' >> {model_dir}/MANIFEST.sha256")
    linked = flow_lab.run("collect.yml", ubuntu_chief, job)
    assert linked.returncode != 0 and "shadow" in linked.output and "symlink" in linked.output, linked.describe()
    assert "root:" not in linked.output and "$y$" not in linked.output and "$6$" not in linked.output

    write_model_dir(flow_lab, job, {"a.bin": b"a" * 100, escape: b"x"})  # the manifest lists the escape's name
    escaped = flow_lab.run("collect.yml", ubuntu_chief, job)
    assert escaped.returncode != 0 and "control character" in escaped.output, escaped.describe()
    assert escape not in escaped.output and "\x1b" not in escaped.output and "\x07" not in escaped.output

    root = flow_lab.artifacts(job)
    assert not (root / "current").exists() and (not root.exists() or leftovers(root) == [])
    assert sorted(p.name for p in artifacts.iterdir() if p.name != job) == [n for n in before if n != job]
    assert not [p for p in artifacts.rglob("*") if p.name == "shadow" or "AAAA" in p.name]


def reaches(flows: Flows, source: str | None, target: str, port: int) -> bool:
    """Can ``source`` (a lab host, or None for the control machine) open a TCP connection to target:port?"""
    address = flows.lab.host(target).address
    if source is None:
        try:
            with socket.create_connection((address, port), timeout=3):
                return True
        except OSError:
            return False
    code = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)\n"
            "except OSError:\n    sys.exit(1)\n")
    return flows.lab.ssh(source, f"python3 -c '{code}' {address} {port}", check=False).returncode == 0


def test_firewall_lets_only_peers_reach_the_training_port(flow_lab: Flows) -> None:
    # The flow lab was prepared as CLUSTER=onprem: the firewall is on. The hosts and slots of the prepare run (a
    # different peer set is a different firewall: a flow on three of the hosts left their rules for those three, and
    # this run, as any prepare, puts the four hosts' back). Something listens on the port of f-w1.
    hosts = flow_lab.hosts_file("deploy-fw", PS_SLOTS)
    settled = flow_lab.run("site.yml", hosts, "prepare")
    assert settled.returncode == 0, settled.describe()
    flow_lab.lab.ssh("f-w1", f"systemd-run --unit tfc-listen --collect python3 -m http.server {TRAIN_PORT}")
    try:
        time.sleep(1)
        assert flow_lab.lab.ssh("f-w1", "nft list table inet tfcluster", check=False).returncode == 0
        assert reaches(flow_lab, "f-w0", "f-w1", TRAIN_PORT), "a peer must reach the training port"
        assert not reaches(flow_lab, None, "f-w1", TRAIN_PORT), "the control machine is no peer: dropped"
        assert reaches(flow_lab, None, "f-w1", 22), "SSH is untouched"
    finally:
        flow_lab.lab.ssh("f-w1", "systemctl stop tfc-listen", check=False)
    # Forced, on the hosts that prepare left: every role runs, and must change nothing.
    forced = flow_lab.run("site.yml", hosts, "prepare", {"tfcluster_prepare_force": True})
    assert forced.returncode == 0, forced.describe()
    assert all(counts["changed"] == 0 for counts in forced.recap.values()), forced.recap
    # the role ran, and found nothing to change
    assert "TASK [tfcluster.cluster.firewall : Write the rules]" in forced.output


def test_firewall_lets_only_the_job_user_reach_the_training_port_on_the_host(flow_lab: Flows) -> None:
    """Issue 18: TensorFlow's port has no authentication, so on the host itself only the job user may connect: a
    second local user is refused over loopback and over the host's own address (both leave through lo), the job
    user is not, and a peer still reaches it."""
    host, other = "f-w1", "tfc-intruder"
    address = flow_lab.lab.host(host).address
    flow_lab.lab.ssh(host, f"id {other} >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin {other}")
    flow_lab.lab.ssh(host, f"systemd-run --unit tfc-listen-local --collect python3 -m http.server {TRAIN_PORT}")
    code = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)\n"
            "except OSError:\n    sys.exit(1)\n")

    def reaches_as(user: str, target: str) -> bool:
        command = f"runuser -u {user} -- python3 -c '{code}' {target} {TRAIN_PORT}"
        return flow_lab.lab.ssh(host, command, check=False).returncode == 0

    try:
        time.sleep(1)
        assert "meta skuid" in flow_lab.lab.ssh(host, "nft list chain inet tfcluster output").stdout
        for target in ("127.0.0.1", address):
            assert reaches_as("tfcluster", target), f"the job user must reach {target}:{TRAIN_PORT}"
            assert not reaches_as(other, target), f"another local user must not reach {target}:{TRAIN_PORT}"
        assert reaches(flow_lab, "f-w0", host, TRAIN_PORT), "a peer must still reach the training port"
    finally:
        flow_lab.lab.ssh(host, "systemctl stop tfc-listen-local", check=False)
        flow_lab.lab.ssh(host, f"userdel {other}", check=False)


def test_a_prepared_cluster_skips_the_prepare_after_one_probe(flow_lab: Flows) -> None:
    hosts = flow_lab.hosts_file("deploy-noop", PS_SLOTS)
    runs = [flow_lab.run("site.yml", hosts, "prepare") for _ in range(2)]
    one = [flow_lab.run("site.yml", hosts, "prepare", args=["--limit", "f-chief,localhost"]) for _ in range(2)]
    for run in runs + one:
        assert run.returncode == 0, run.describe()
        ran = [r for r in ("nvidia_driver :", "python_runtime :", "trainer :", "dataset :", "firewall :")
               if f"TASK [tfcluster.cluster.{r}" in run.output]
        assert not ran, f"a prepared host ran {ran}"  # one probe per host, then end_host
        assert all(counts["changed"] == 0 for counts in run.recap.values())
    four, single = min(r.seconds for r in runs), min(r.seconds for r in one)
    print(f"[deploy] no-op site.yml: 4 hosts {four:.2f} s, 1 host {single:.2f} s ({four / single:.2f}x)")


def test_collector_throughput_against_scp(flow_lab: Flows, ubuntu_chief: Path, tmp_path: Path) -> None:
    """A figure (printed), and the big file arrives intact as the job user over the non-root login."""
    job = flow_lab.job("deploy-big")
    model_dir = write_model_dir(flow_lab, job, {"small.bin": b"s"})
    flow_lab.lab.ssh(CHIEF, f"head -c 256M /dev/urandom > {model_dir}/big.bin && cd {model_dir} && "
                            "sha256sum big.bin small.bin > MANIFEST.sha256 && chown -R tfcluster: .")
    run = flow_lab.run("collect.yml", ubuntu_chief, job)
    assert run.returncode == 0, run.describe()
    assert verify_dir(flow_lab.artifacts(job) / "current") == 2
    rate = re.search(r"\((\d+) MB at (\d+) MB/s\)", run.output)
    started = time.monotonic()
    subprocess.run(["scp", "-q", "-F", str(flow_lab.lab.ssh_config), f"{CHIEF}:{model_dir}/big.bin",
                    str(tmp_path / "big.bin")], check=True, timeout=600)
    scp = time.monotonic() - started
    transfer = f"{rate.group(2)} MB/s transfer" if rate else "transfer rate not printed"
    print(f"[deploy] 256 MiB: collect.yml {run.seconds:.1f} s (whole playbook; {transfer}), scp {scp:.1f} s "
          f"({268 / scp:.0f} MB/s)")


def sshd_down_for(flows: Flows, host: str, seconds: int) -> None:
    """Stop the host's sshd and start it again ``seconds`` later. The timer comes first: stopping sshd may end the
    very SSH session that asks for it. Its accuracy is set: a timer's default AccuracySec is 1 min (systemd.timer(5))
    and a 20 s outage lasted 40-78 s (three tries on a lab host; the late-sshd prepare's 60 s wait ran out once)."""
    flows.lab.ssh(host, f"systemd-run --on-active={seconds} --timer-property=AccuracySec=100ms --collect "
                        "systemctl start ssh.service && systemctl stop ssh.socket ssh.service", check=False)
    wait_until(lambda: not flows.lab.reachable(host), 15, f"{host}'s sshd still answers after the stop")


def test_a_late_sshd_is_waited_for_and_a_missing_one_named(flow_lab: Flows, tmp_path: Path) -> None:
    hosts = flow_lab.hosts_file("deploy-late", PS_SLOTS)
    fresh = {"ansible_control_path_dir": str(tmp_path / "cp"), "tfcluster_prepare_force": True}
    only = ["--limit", "f-w1,localhost"]  # localhost: site.yml stages the release there
    started = time.monotonic()
    sshd_down_for(flow_lab, "f-w1", 20)
    late = flow_lab.run("site.yml", hosts, "prepare", fresh, args=only)
    assert late.returncode == 0, late.describe()
    assert time.monotonic() - started >= 15
    sshd_down_for(flow_lab, "f-w1", 60)
    try:
        never = flow_lab.run("site.yml", hosts, "prepare", {**fresh, "ansible_control_path_dir": str(tmp_path / "c2"),
                                                           "host_ready_ssh_timeout": 5}, args=only)
        assert never.returncode != 0
        assert "f-w1: SSH (root@" in never.output and "did not answer within 5 s" in never.output
    finally:
        deadline = time.monotonic() + 90
        while not flow_lab.lab.reachable("f-w1") and time.monotonic() < deadline:
            time.sleep(1)


def test_datasets_reach_every_host_checked_and_copied_only_when_they_differ(flow_lab: Flows) -> None:
    hosts = flow_lab.hosts_file("deploy-data", PS_SLOTS)
    data = {"tfcluster_datasets": ["mnist"]}
    want = hashlib.sha256((Path(__file__).resolve().parents[2] / ".cache/datasets/mnist.npz").read_bytes()).hexdigest()
    first = flow_lab.run("site.yml", hosts, "prepare", data)
    assert first.returncode == 0, first.describe()
    path = "/var/lib/tfcluster/datasets/mnist.npz"
    for host in ("f-chief", "f-w0", "f-w1", "f-ps"):
        assert flow_lab.lab.ssh(host, f"sha256sum {path}").stdout.split()[0] == want
    again = flow_lab.run("site.yml", hosts, "prepare", data)
    assert again.returncode == 0 and all(c["changed"] == 0 for c in again.recap.values())
    assert "Copy the datasets" not in again.output  # a prepared cluster: one probe per host, no role
    flow_lab.lab.ssh("f-w0", f"printf x >> {path}")
    # Forced, the dataset role alone (its tag): every host checks its copy, one copies (a forced run of every role
    # changing nothing is the firewall test's).
    fixed = flow_lab.run("site.yml", hosts, "prepare", {**data, "tfcluster_prepare_force": True},
                         args=["--tags", "dataset"])
    assert fixed.returncode == 0, fixed.describe()
    assert fixed.recap["f-w0"]["changed"] >= 1 and fixed.recap["f-w1"]["changed"] == 0
    assert flow_lab.lab.ssh("f-w0", f"sha256sum {path}").stdout.split()[0] == want
