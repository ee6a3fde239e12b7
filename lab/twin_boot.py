"""What an instance's boot does in the AWS twin (lab/twin.py): the user data Terraform renders, applied to a lab host
as cloud-init would (its files, its commands), the boot guard's settings as the module encodes them, and the console
output EC2 returns (the host keys cloud-init prints).
"""

from __future__ import annotations

import base64
import email
import gzip
import json
import shlex
from collections.abc import Mapping
from typing import Any

from lab.lab import Lab
from lab.paths import REPO


class TwinError(RuntimeError):
    """The twin cannot run here; the message says why."""


MODULE = REPO / "infra" / "modules" / "gpu_cluster"


def boot_guard_settings(idle_minutes: int = 30, expires_at: str | None = None, terminate: bool = False) -> str:
    """jsonencode(local.autostop_settings) of infra/modules/gpu_cluster/userdata.tf: keys sorted, compact."""
    settings = {"enabled": idle_minutes > 0, "idle_minutes": idle_minutes if idle_minutes > 0 else 30, "mode": "jobs",
                "gpu_idle_percent": 0, "gpu_idle_window_minutes": 30, "terminate": terminate,
                "uncollected_grace_minutes": 1440, "expires_at": expires_at}
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def render_boot_guard(settings: str, enable: bool = True, interval: int = 60) -> str:
    """The boot guard's user data as Terraform's templatefile() renders the module's template (its ${...}
    and its one %{ if enable ~} block), for a host the twin did not launch (a lab host of its own)."""
    import re

    text = (MODULE / "templates" / "cloud-config.yaml.tpl").read_text()
    guard = base64.b64encode(gzip.compress((MODULE / "files" / "boot_guard.py").read_bytes())).decode()
    text = re.sub(r"%\{ if enable ~\}\n(.*?)%\{ endif ~\}\n?", lambda m: m.group(1) if enable else "", text,
                  flags=re.S)
    text = text.replace("${settings}", settings).replace("${guard}", guard).replace("${interval}", str(interval))
    if "${" in text or "%{" in text:
        raise TwinError(f"{MODULE / 'templates/cloud-config.yaml.tpl'} has a directive render_boot_guard does not "
                        "know: teach it, or read the user data Terraform rendered (Twin.user_data)")
    return text


def apply_cloud_config(lab: Lab, name: str, user_data: str) -> None:
    """What cloud-init does with a user data on the lab host ``name``, as root: write_files, then runcmd."""
    config = cloud_config(user_data)
    for item in config.get("write_files", []):
        mode, path = str(item.get("permissions", "0644")), str(item["path"])
        lab.ssh(name, f"install -D -m {shlex.quote(mode)} /dev/stdin {shlex.quote(path)}", input=file_content(item))
    for command in config.get("runcmd", []):
        lab.ssh(name, command if isinstance(command, str) else shlex.join(map(str, command)))


def cloud_config(user_data: str) -> dict[str, Any]:
    """The cloud-config of a user data: a plain ``#cloud-config`` document, or the text/cloud-config parts of a
    MIME multipart one, their write_files and runcmd lists appended in order (the guard's part says
    list(append))."""
    import yaml

    if user_data.startswith("#cloud-config"):
        return yaml.safe_load(user_data) or {}
    message = email.message_from_string(user_data)
    merged: dict[str, Any] = {}
    for part in message.walk() if message.is_multipart() else []:
        if part.get_content_type() != "text/cloud-config":
            continue
        doc = yaml.safe_load(part.get_payload()) or {}
        for key, value in doc.items():
            merged[key] = [*merged.get(key, []), *value] if isinstance(value, list) else value
    return merged


def file_content(item: Mapping[str, Any]) -> str:
    """A write_files entry's content (cloud-init's encodings: gz+b64, b64, or plain)."""
    content = str(item.get("content", ""))
    encoding = str(item.get("encoding", "")).lower()
    if encoding in ("gz+b64", "gzip+base64", "gz+base64", "gzip+b64"):
        return gzip.decompress(base64.b64decode(content)).decode("utf-8")
    if encoding in ("b64", "base64"):
        return base64.b64decode(content).decode("utf-8")
    return content


RESTARTED_CONSOLE = ("[    0.000000] Linux version 6.8.0-1021-aws (buildd@lcy02-amd64-040) #23~22.04.1-Ubuntu SMP\n"
                     "[   12.903311] cloud-init[790]: Cloud-init v. 24.4 running 'modules:final' (not the first "
                     "boot of this instance: no SSH host keys printed)\n")


def cloud_init_console(public_key: str) -> str:
    """A console log as an EC2 instance's shows it once cloud-init has run: its host keys between the markers."""
    kind, blob = public_key.split()[:2]
    return ("[    0.000000] Linux version 6.8.0-1021-aws (buildd@lcy02-amd64-040) #23~22.04.1-Ubuntu SMP\n"
            "[   14.221934] cloud-init[812]: Cloud-init v. 24.4-0ubuntu1~22.04.1 running 'modules:final'\n"
            "-----BEGIN SSH HOST KEY FINGERPRINTS-----\n"
            "256 SHA256:(fingerprint) root@ip (ED25519)\n"
            "-----END SSH HOST KEY FINGERPRINTS-----\n"
            "-----BEGIN SSH HOST KEY KEYS-----\n"
            f"{kind} {blob} root@ip\n"
            "-----END SSH HOST KEY KEYS-----\n"
            "[   15.102113] cloud-init[812]: Cloud-init v. 24.4 finished. Datasource DataSourceEc2Local.\n")
