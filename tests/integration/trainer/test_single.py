"""Real single-host trainer runs: mirrored (CPU fallback) on S3 data from moto, TFRecord FILE sharding, the TPU
refusal on a host without one, and spot preemption against a fake IMDSv2 on 127.0.0.1 with backups in moto's S3
(checkpoint_s3)."""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.trainer.trainer_procs import (
    START_ALLOWANCE_S,
    LocalCluster,
    base_env,
    evaluate_export,
    free_ports,
    run_python,
    run_trainer,
)
from tfcluster.core import contract, files

pytestmark = pytest.mark.integration

QUICK = ["--epochs", "2", "--no-tensorboard", "--steps-per-execution", "5"]


@pytest.fixture
def moto_s3(tmp_path: Path) -> Iterator[str]:
    port = free_ports(1)[0]
    server = Path(sys.executable).parent / "moto_server"
    log = open(tmp_path / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("moto_server did not start: " + (tmp_path / "moto.log").read_text())
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _s3_client(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    import boto3

    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    return boto3.client("s3", endpoint_url=endpoint)


def _upload(endpoint: str, path: Path, key: str, monkeypatch: pytest.MonkeyPatch) -> str:
    s3 = _s3_client(endpoint, monkeypatch)
    s3.create_bucket(Bucket="tfcluster-data")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    s3.upload_file(str(path), "tfcluster-data", key, ExtraArgs={"Metadata": {"sha256": digest}})
    return digest


def test_mirrored_from_s3_exports_a_loadable_model(moto_s3: str, mnist_subset: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    digest = _upload(moto_s3, mnist_subset, "mnist/subset.npz", monkeypatch)
    model_dir = tmp_path / "model"
    cache = tmp_path / "cache"
    args = ["--model-dir", str(model_dir), "--data", "s3://tfcluster-data/mnist/subset.npz", "--s3-endpoint-url",
            moto_s3, "--cache-dir", str(cache), "--data-sha256", digest, "--epochs", "3", "--learning-rate", "0.003"]
    result = run_trainer(args, tmp_path, env=AWS_ENV)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "falls back to the CPU" in result.stderr
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["strategy"] == "mirrored" and metrics["replicas"] == 1 and metrics["global_batch"] == 64
    assert metrics["test_accuracy"] > 0.6
    assert metrics["fit_teardown_s"] >= 0, metrics  # measured; its goal (<= 1 s) is bench.train_throughput's
    assert files.verify_dir(model_dir) > 0
    cached = cache / "s3" / "tfcluster-data" / "mnist" / "subset.npz"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == digest
    config = json.loads((model_dir / "config.json").read_text())
    assert config["strategy"] == "mirrored" and config["config"]["data"].startswith("s3://")
    assert evaluate_export(mnist_subset, model_dir / "export", tmp_path)["accuracy"] > 0.6

    # a wrong expected checksum is bad input: exit 2, nothing trained
    bad = run_trainer(["--model-dir", str(tmp_path / "bad"), "--data", "s3://tfcluster-data/mnist/subset.npz",
                       "--s3-endpoint-url", moto_s3, "--cache-dir", str(tmp_path / "cache2"),
                       "--data-sha256", "0" * 64], tmp_path, env=AWS_ENV)
    assert bad.returncode == 2, bad.stderr[-3000:]
    assert "sha256" in bad.stderr and not (tmp_path / "bad" / "DONE").exists()


@pytest.fixture(scope="module")
def shards(mnist_subset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MNIST subset as 4 TFRecord files, written once (a Python process that imports TensorFlow) for the
    module's tests."""
    shards = tmp_path_factory.mktemp("records")
    code = (f"import numpy as np; from trainer.data import write_tfrecords; a = np.load({str(mnist_subset)!r}); "
            f"write_tfrecords(a['x_train'], a['y_train'], {str(shards)!r} + '/train-{{}}.tfrecord', 4)")
    made = run_python(code, shards)
    assert made.returncode == 0, made.stderr[-3000:]
    assert len(list(shards.glob("train-*.tfrecord"))) == 4
    return shards


def test_tfrecord_file_sharding_two_workers(local_cluster: Callable[..., LocalCluster], shards: Path) -> None:
    cluster = local_cluster({"worker": 2}, ["--dataset", "tfrecord", "--data", str(shards / "train-*.tfrecord"),
                                            "--steps-per-epoch", "8", *QUICK])
    cluster.start_all()
    assert cluster.wait(timeout=180 + START_ALLOWANCE_S) == {"worker-0": 0, "worker-1": 0}, cluster.logs()
    metrics = json.loads((cluster.model_dir / "metrics.json").read_text())
    assert metrics["dataset"] == "tfrecord" and metrics["epochs"] == 2 and "test_accuracy" not in metrics


def test_tfrecord_needs_a_file_per_worker(local_cluster: Callable[..., LocalCluster], shards: Path) -> None:
    one = sorted(shards.glob("train-*.tfrecord"))[0]  # one file for two workers
    cluster = local_cluster({"worker": 2}, ["--dataset", "tfrecord", "--data", str(one),
                                            "--steps-per-epoch", "2", *QUICK])
    cluster.start_all()
    codes = cluster.wait(timeout=120 + START_ALLOWANCE_S)
    assert codes["worker-1"] == 1
    assert "cannot be FILE-sharded" in cluster.procs["worker-1"].text()


def test_tpu_without_a_tpu_vm_exits_2_before_tensorflow(tmp_path: Path) -> None:
    """--strategy tpu is a single Cloud TPU VM with TensorFlow <= 2.20 and its TPU runtime: this host has none of
    it, so the trainer says so and exits 2 before TensorFlow (no server, no status.json)."""
    result = run_trainer(["--model-dir", str(tmp_path / "m"), "--strategy", "tpu", "--dataset", "synthetic"],
                         tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "tpu runs only on a single Cloud TPU VM (tpu='local'), with TensorFlow <= 2.20" in result.stderr
    assert "no TPU device" in result.stderr and "Fix: " in result.stderr
    assert not (tmp_path / "m" / "status.json").exists()


class FakeImds(http.server.ThreadingHTTPServer):
    """IMDSv2 on loopback: token required; spot/instance-action is 404 until ``notice`` is set."""

    notice = threading.Event()
    token = "fake-token-123"
    requests: list[str]

    def __init__(self) -> None:
        self.requests = []
        super().__init__(("127.0.0.1", 0), _ImdsHandler)


class _ImdsHandler(http.server.BaseHTTPRequestHandler):
    server: FakeImds

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        self.server.requests.append(f"PUT {self.path}")
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._send(200, self.server.token)
        else:
            self._send(400)

    def do_GET(self) -> None:
        self.server.requests.append(f"GET {self.path}")
        if self.headers.get("X-aws-ec2-metadata-token") != self.server.token:
            self._send(401)
        elif self.path != "/latest/meta-data/spot/instance-action" or not self.server.notice.is_set():
            self._send(404)
        else:
            self._send(200, json.dumps({"action": "terminate", "time": "2026-11-30T06:00:00Z"}))


@pytest.fixture
def fake_imds() -> Iterator[FakeImds]:
    server = FakeImds()
    server.notice = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_spot_notice_backs_up_to_s3_and_a_replacement_host_resumes(fake_imds: FakeImds, moto_s3: str,
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """checkpoint_s3 (issue 14): the backup is uploaded before exit 3; a fresh disk resumes from S3; the finished
    model dir lands in S3 with DONE."""
    endpoint = f"http://127.0.0.1:{fake_imds.server_address[1]}"
    s3 = _s3_client(moto_s3, monkeypatch)
    s3.create_bucket(Bucket="tfcluster-ckpt")
    model_dir = tmp_path / "model"
    status_file = model_dir / "status.json"
    args = ["--dataset", "synthetic", "--epochs", "3", "--steps-per-epoch", "200", "--steps-per-execution", "5",
            "--no-tensorboard", "--spot-watch", "on", "--imds-endpoint", endpoint, "--spot-poll-interval", "0.2",
            "--status-interval", "0.1", "--s3-endpoint-url", moto_s3]
    env = {**base_env(tmp_path), **AWS_ENV, contract.ENV_CHECKPOINT_S3: "s3://tfcluster-ckpt/jobs/spot-1"}
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "--model-dir", str(model_dir), *args],
                            cwd=Path(__file__).resolve().parents[3], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120 + START_ALLOWANCE_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            st = json.loads(status_file.read_text())
        except (OSError, ValueError):
            st = {}
        if st.get("epochs_done") == 1 and st.get("epoch") == 2 and st.get("step", 0) >= 20:  # inside epoch 2
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    fake_imds.notice.set()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out[-4000:]
    assert "spot interruption notice: terminate" in out
    status = json.loads(status_file.read_text())
    assert status["state"] == "preempted" and status["backup_uploaded"] is True
    assert not (model_dir / "DONE").exists()
    local = model_dir / "backup" / "local-0"
    numbers = sorted(int(p.name[len("backup-"):-len(".index")]) for p in local.glob("backup-*.index"))
    # normally a mid-epoch save in the 2nd epoch (11); 20 if the notice landed right at its end
    assert numbers[-1] in (11, 20), numbers
    assert "PUT /latest/api/token" in fake_imds.requests
    remote = sorted(o["Key"].rsplit("/", 1)[1] for o in s3.list_objects_v2(
        Bucket="tfcluster-ckpt", Prefix="jobs/spot-1/backup/local-0/")["Contents"])
    assert remote == sorted(p.name for p in local.iterdir())  # every file of the backups, and their index

    # a replacement instance (an empty disk, no notice): resumes from S3 and completes
    fake_imds.notice.clear()
    fresh = tmp_path / "replacement"
    again = run_trainer(["--model-dir", str(fresh), *args], tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "fetched" in again.stderr and "backup file(s) from s3://tfcluster-ckpt/jobs/spot-1" in again.stderr
    metrics = json.loads((fresh / "metrics.json").read_text())
    assert metrics["resumes"] == 1 and metrics["initial_epoch"] == numbers[-1] // 10 and metrics["epochs"] == 3
    listed = [rel for _, rel in files.parse_manifest((fresh / contract.MANIFEST).read_text())]
    model = "jobs/spot-1/model/"
    keys = {o["Key"][len(model):] for o in s3.list_objects_v2(Bucket="tfcluster-ckpt", Prefix=model)["Contents"]}
    assert keys == {*listed, contract.MANIFEST, contract.DONE}
    body = s3.get_object(Bucket="tfcluster-ckpt", Key=model + contract.DONE)["Body"].read()
    assert body == (fresh / contract.DONE).read_bytes()
