"""The collector's manifest tool: parse, verify, and the pull (tar stream and local copy)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "playbooks" / "roles"


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module



manifest = load("manifest", ROLES / "collector/files/manifest.py")


# --- releases and manifests -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("", "lists no files"),
    ("abc  x\n", "is not '<sha256>  <path>'"),
    (f"{'0' * 64}  /etc/passwd\n", "names an unsafe path: '/etc/passwd'"),
    (f"{'0' * 64}  a/../../b\n", "names an unsafe path"),
    (f"{'0' * 64}  DONE\n", "names an unsafe path: 'DONE'"),
])
def test_manifest_parse_rejects(text: str, message: str) -> None:
    with pytest.raises(manifest.ManifestError, match=message):
        manifest.parse(text)


def test_manifest_verify_problems(tmp_path: Path) -> None:
    with pytest.raises(manifest.ManifestError, match="no DONE marker: refusing an unfinished checkpoint"):
        manifest.verify(str(tmp_path))
    (tmp_path / "DONE").write_text("{}")
    with pytest.raises(manifest.ManifestError, match=r"has no MANIFEST\.sha256"):
        manifest.verify(str(tmp_path))
    (tmp_path / "a").write_text("a")
    (tmp_path / "MANIFEST.sha256").write_text(f"{'0' * 64}  a\n{'1' * 64}  gone\n")
    with pytest.raises(manifest.ManifestError, match="sha256 mismatch: a; missing gone"):
        manifest.verify(str(tmp_path))



# --- the collector's pull (stream and local copy) -----------------------------------------------------------------

def model_dir(root: Path, files: dict[str, bytes], optional: dict[str, bytes] | None = None) -> tuple[Path, str]:
    """A finished model dir: the files, their MANIFEST.sha256 and DONE; returns it and the manifest text."""
    root.mkdir(parents=True)
    for rel, data in {**files, **(optional or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    text = "".join(f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in sorted(files.items()))
    (root / "MANIFEST.sha256").write_text(text)
    (root / "DONE").write_text("{}\n")
    return root, text


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`ssh ... -- HOST COMMAND` that runs COMMAND here with sh, logging its argv: the real tar, no network."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh-argv.json"
    script = bin_dir / "ssh"
    script.write_text(f"#!{sys.executable}\nimport json, subprocess, sys\n"
                      f"open({str(log)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                      "sys.exit(subprocess.call(['sh', '-c', sys.argv[-1]]))\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return log


FILES = {"export/saved_model.pb": b"graph" * 1000, "export/variables/v.data": bytes(range(256)) * 4096,
         "checkpoints/ckpt-1.index": b"idx", "metrics.json": b'{"epochs": 3}'}


def request(src: Path, text: str, **more: object) -> dict:
    return {"name": "chief-0", "connection": "ssh", "host": "10.0.0.5", "port": 2222, "user": "ubuntu",
            "private_key_file": "~/.ssh/k", "ssh_args": "-o ControlMaster=auto", "ssh_common_args": "",
            "ssh_extra_args": "", "host_key_checking": False, "model_dir": str(src), "manifest": text,
            "optional": ["status.json", "config.json", "metrics.json"], **more}


@pytest.mark.parametrize("connection", ["ssh", "local"])
def test_pull_brings_every_file_home_verified_and_is_idempotent(tmp_path: Path, fake_ssh: Path, connection: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest, "THREADED_WRITE", 100_000)  # the 1 MiB file takes the two-thread path
    src, text = model_dir(tmp_path / "chief", FILES, optional={"status.json": b"{}"})
    dest = tmp_path / "home" / "job"
    out = manifest.pull(str(dest), request(src, text, connection=connection))
    assert out["changed"] is True and out["files"] == len(FILES) + 3  # + MANIFEST, DONE, status.json
    got = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}
    assert got == {*FILES, "MANIFEST.sha256", "DONE", "status.json"}  # config.json is optional and absent
    assert manifest.verify(str(dest)) == len(FILES)
    assert fake_ssh.exists() == (connection == "ssh")
    assert manifest.pull(str(dest), request(src, text, connection=connection))["changed"] is False
    assert sorted(p.name for p in dest.parent.iterdir()) == ["job"]  # no staging or old copy left


def test_pull_replaces_an_older_copy_whole(tmp_path: Path, fake_ssh: Path) -> None:
    dest = tmp_path / "home" / "job"
    dest.mkdir(parents=True)
    (dest / "stale.bin").write_bytes(b"old run")
    src, text = model_dir(tmp_path / "chief", FILES)
    manifest.pull(str(dest), request(src, text))
    assert not (dest / "stale.bin").exists() and (dest / "DONE").exists()


@pytest.mark.parametrize(("damage", "message"), [
    (lambda src: (src / "export/saved_model.pb").write_bytes(b"evil"), "sha256 mismatch: export/saved_model.pb"),
    (lambda src: (src / "checkpoints/ckpt-1.index").unlink(), "missing checkpoints/ckpt-1.index"),
    (lambda src: (src / "DONE").unlink(), "missing DONE"),
])
def test_pull_refuses_a_damaged_checkpoint_and_writes_nothing(tmp_path: Path, fake_ssh: Path, damage,
                                                              message: str) -> None:
    src, text = model_dir(tmp_path / "chief", FILES)
    damage(src)
    dest = tmp_path / "home" / "job"
    with pytest.raises(manifest.ManifestError) as error:
        manifest.pull(str(dest), request(src, text))
    assert message in str(error.value)
    assert f"collecting {src} from chief-0 failed" in str(error.value)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_pull_names_the_host_when_ssh_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text("#!/bin/sh\necho 'ssh: connect to host 10.0.0.5 port 2222: No route to host' >&2\n"
                                 "exit 255\n")
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    src, text = model_dir(tmp_path / "chief", FILES)
    proc = subprocess.run([sys.executable, str(ROLES / "collector/files/manifest.py"), "pull", str(tmp_path / "d")],
                          input=json.dumps(request(src, text)), capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    msg = json.loads(proc.stdout)["msg"]
    assert "from chief-0 failed" in msg and "No route to host" in msg and "exited 255" in msg
    assert not (tmp_path / "d").exists()


def test_receive_refuses_what_was_not_asked_for(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        link = tarfile.TarInfo("DONE")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    buf.seek(0)
    with pytest.raises(manifest.ManifestError, match=r"'DONE', which was not asked for \(or is not a regular file"):
        manifest.receive(buf, str(tmp_path), {"DONE": None})


def test_ssh_argv_follows_ansibles_settings() -> None:
    conn = {"host": "10.0.0.5", "port": 2222, "user": "ubuntu", "private_key_file": "/k",
            "ssh_args": "-o ControlMaster=auto", "ssh_common_args": "-o 'ProxyCommand=ssh -W %h:%p b'",
            "ssh_extra_args": "-4", "host_key_checking": False, "ciphers": "aes128-gcm@openssh.com,aes128-ctr"}
    argv = manifest.ssh_argv(conn, "tar -cf - x")
    assert argv == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "ControlMaster=auto", "-o",
                    "ProxyCommand=ssh -W %h:%p b", "-4", "-o", "Ciphers=aes128-gcm@openssh.com,aes128-ctr", "-p",
                    "2222", "-l", "ubuntu", "-i", "/k", "--", "10.0.0.5", "tar -cf - x"]
    plain = manifest.ssh_argv({"host": "h", "port": None, "user": None, "host_key_checking": True}, "true")
    assert plain == ["ssh", "-o", "BatchMode=yes", "--", "h", "true"]
    with pytest.raises(manifest.ManifestError, match="names no host"):
        manifest.ssh_argv({"host": ""}, "true")
