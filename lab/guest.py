"""What the lab writes into one host before it boots: identity, network, host key, root's key, a cloud image's
login user with sudo, a late sshd. Everything goes into the host's overlay, never into the shared rootfs."""

from __future__ import annotations

import uuid
from pathlib import Path

from lab import system
from lab.config import LabHost, LabSpec
from lab.render import (
    HOST_KEY,
    render_etc_hosts,
    render_front_network,
    render_network,
    render_sshd_delay,
    render_sudoers,
)


def write_identity(merged: Path, host: LabHost, spec: LabSpec) -> None:
    etc = merged / "etc"
    (etc / "machine-id").write_text(uuid.uuid4().hex + "\n")
    (etc / "hostname").write_text(host.name + "\n")
    (etc / "hosts").write_text(render_etc_hosts(spec))
    (etc / "systemd/network").mkdir(parents=True, exist_ok=True)
    (etc / "systemd/network/10-lab-host0.network").write_text(render_network(host, spec))
    if host.front_address is not None:
        (etc / "systemd/network/11-lab-front0.network").write_text(render_front_network(host, spec))
    if host.sshd_delay:
        dropin = etc / "systemd/system/ssh.service.d"
        dropin.mkdir(parents=True, exist_ok=True)
        (dropin / "10-lab-late.conf").write_text(render_sshd_delay(host.sshd_delay))


def new_host_key(merged: Path, name: str) -> str:
    """Generate the host's ed25519 key (replacing any); returns the public key line."""
    key = merged / HOST_KEY
    for path in (key, key.with_suffix(".pub")):
        path.unlink(missing_ok=True)
    system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(key)])
    return key.with_suffix(".pub").read_text().strip()


def host_key(merged: Path) -> str:
    return (merged / HOST_KEY).with_suffix(".pub").read_text().strip()


def authorize(home: Path, public_key: str, uid: int = 0, gid: int = 0) -> None:
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    auth = ssh_dir / "authorized_keys"
    auth.write_text(public_key.strip() + "\n")
    auth.chmod(0o600)
    for path in (ssh_dir, auth):
        system.chown(path, uid, gid)


def add_login_user(merged: Path, user: str, public_key: str) -> None:
    """A cloud image's user: home, bash, passwordless sudo, the key pair's key; no password (not locked: sshd
    still takes the key)."""
    system.run(["useradd", "--root", str(merged), "--create-home", "--shell", "/bin/bash", "--groups", "sudo", user])
    system.run(["usermod", "--root", str(merged), "--password", "*", user])
    sudoers = merged / "etc/sudoers.d" / f"90-lab-{user}"
    sudoers.write_text(render_sudoers(user))
    sudoers.chmod(0o440)
    uid, gid = passwd_ids(merged, user)
    authorize(merged / "home" / user, public_key, uid, gid)


def passwd_ids(merged: Path, user: str) -> tuple[int, int]:
    for line in (merged / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise KeyError(user)


def prepare(merged: Path, host: LabHost, spec: LabSpec, root_key: str) -> str:
    """Every file of one host (its overlay is mounted at ``merged``); returns its public host key."""
    write_identity(merged, host, spec)
    public = new_host_key(merged, host.name)
    authorize(merged / "root", root_key)
    if spec.user and spec.user_key:
        add_login_user(merged, spec.user, spec.user_key)
    return public
