"""Where the collector role takes the model dir from (collector_source auto, issue 22): with the job's S3 prefix
holding the chief's finished model dir (DONE there, the same manifest), from S3 without the chief's stream; with no
DONE there, or another version, from the chief. The role runs on localhost (a local chief: the stream is a direct
copy) against an S3 endpoint of moto."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

moto_server = pytest.importorskip("moto.server")

REPO = Path(__file__).resolve().parents[3]
FILES = {"export/saved_model.pb": b"graph" * 100, "metrics.json": b'{"test_accuracy": 0.98}'}
PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: tfcluster.cluster.collector
"""


def manifest(files: dict[str, bytes]) -> str:
    return "".join(f"{hashlib.sha256(d).hexdigest()}  {r}\n" for r, d in sorted(files.items()))


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "x")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = boto3.client("s3", endpoint_url=endpoint)
    for bucket in client.list_buckets().get("Buckets", []):
        for item in client.list_objects_v2(Bucket=bucket["Name"]).get("Contents", []):
            client.delete_object(Bucket=bucket["Name"], Key=item["Key"])
    client.create_bucket(Bucket="bkt")
    return client


def chief(tmp_path: Path, files: dict[str, bytes]) -> str:
    """The chief's finished model dir under tmp_path/host (collector_model_dir with tfcluster_prefix)."""
    model = tmp_path / "host/var/lib/tfcluster/mnist"
    for rel, data in files.items():
        (model / rel).parent.mkdir(parents=True, exist_ok=True)
        (model / rel).write_bytes(data)
    text = manifest(files)
    (model / "MANIFEST.sha256").write_text(text)
    (model / "DONE").write_text("{}")
    return text


def upload(client: Any, files: dict[str, bytes], done: bool = True) -> None:
    for rel, data in {**files, "MANIFEST.sha256": manifest(files).encode()}.items():
        client.put_object(Bucket="bkt", Key=f"jobs/mnist/model/{rel}", Body=data)
    if done:
        client.put_object(Bucket="bkt", Key="jobs/mnist/model/DONE", Body=b"{}")


def collect(tmp_path: Path, endpoint: str, source: str = "auto") -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(PLAY)
    extra = {"tfcluster_job": "mnist", "tfcluster_prefix": str(tmp_path / "host"), "tfcluster_local": True,
             "tfcluster_artifacts": str(tmp_path / "artifacts"), "tfcluster_checkpoint_s3": "s3://bkt/jobs",
             "tfcluster_s3_endpoint_url": endpoint, "collector_source": source,
             "ansible_python_interpreter": sys.executable}
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "TFCLUSTER_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def tasks_run(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The names of the collector's tasks that ran (not skipped) in an ansible-playbook output."""
    ran, current = [], None
    for line in proc.stdout.splitlines():
        if line.startswith("TASK ["):
            current = line[len("TASK ["):line.rindex("]")].split(" : ")[-1]
        elif current and line.startswith(("ok:", "changed:")):
            ran.append(current)
            current = None
    return ran


def version_of(tmp_path: Path) -> str:
    return os.readlink(tmp_path / "artifacts/current")


def test_a_finished_copy_in_s3_is_taken_without_the_chiefs_stream(tmp_path: Path, s3: Any, endpoint: str) -> None:
    text = chief(tmp_path, FILES)
    upload(s3, FILES)
    proc = collect(tmp_path, endpoint)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ran = tasks_run(proc)
    assert any(name.startswith("Collect the model dir from the job's S3 prefix") for name in ran), ran
    assert not any(name.startswith("Collect the model dir from the chief") for name in ran), ran
    assert version_of(tmp_path) == hashlib.sha256(text.encode()).hexdigest()
    assert (tmp_path / "artifacts/current/export/saved_model.pb").read_bytes() == FILES["export/saved_model.pb"]
    again = collect(tmp_path, endpoint)
    assert "changed=0" in again.stdout, again.stdout[-2000:]


@pytest.mark.parametrize("s3_state", ["no DONE", "another version"])
def test_the_chief_streams_when_s3_has_no_copy_of_its_model_dir(tmp_path: Path, s3: Any, endpoint: str,
                                                                s3_state: str) -> None:
    text = chief(tmp_path, FILES)
    if s3_state == "no DONE":
        upload(s3, FILES, done=False)  # the upload is still under way (DONE is written last)
    else:
        upload(s3, {**FILES, "metrics.json": b'{"test_accuracy": 0.5}'})  # an older run's
    proc = collect(tmp_path, endpoint)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ran = tasks_run(proc)
    assert "Say why the model dir comes from the chief after all" in ran, ran
    assert any(name.startswith("Collect the model dir from the chief") for name in ran), ran
    assert version_of(tmp_path) == hashlib.sha256(text.encode()).hexdigest()  # the chief's, whatever S3 had


def test_source_chief_never_reads_s3(tmp_path: Path, s3: Any, endpoint: str) -> None:
    chief(tmp_path, FILES)
    upload(s3, FILES)
    proc = collect(tmp_path, endpoint, source="chief")
    assert proc.returncode == 0, proc.stdout[-3000:]
    ran = tasks_run(proc)
    assert not any(name.startswith("Collect the model dir from the job's S3 prefix") for name in ran), ran
    assert any(name.startswith("Collect the model dir from the chief") for name in ran), ran
