"""Model-dir files (manifest, DONE, status) and the IMDSv2 spot client, without TensorFlow."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfcluster.core import contract, files
from trainer import artifacts, spot, stop


def _model_dir(tmp_path: Path) -> Path:
    (tmp_path / "export" / "variables").mkdir(parents=True)
    (tmp_path / "export" / "saved_model.pb").write_bytes(b"pb")
    (tmp_path / "export" / "variables" / "v.index").write_bytes(b"idx")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "epoch-001.index").write_bytes(b"c")
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "status.json").write_text("{}")
    return tmp_path


def test_finalize_lists_the_deliverables_and_verifies(tmp_path: Path) -> None:
    root = _model_dir(tmp_path)
    (root / "logs").mkdir()
    (root / "logs" / "events").write_bytes(b"tb")
    assert artifacts.finalize(root, {"task": "chief:0"}) == 5
    lines = (root / "MANIFEST.sha256").read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == [
        "checkpoints/epoch-001.index", "config.json", "export/saved_model.pb", "export/variables/v.index",
        "metrics.json"]
    assert files.verify_dir(root) == 5
    done = json.loads((root / "DONE").read_text())
    assert done == {"task": "chief:0", "manifest_sha256": files.sha256_file(root / "MANIFEST.sha256")}
    (root / "export" / "saved_model.pb").write_bytes(b"changed")
    (root / "metrics.json").unlink()
    with pytest.raises(files.ManifestError, match=r"sha256 mismatch: export/saved_model.pb; missing metrics.json"):
        files.verify_dir(root)
    artifacts.clear_completion(root)
    assert not (root / "DONE").exists()
    assert not list(root.rglob(".tmp-*"))  # no temp files left by atomic writes


def test_finalize_fsyncs_everything_before_manifest_then_done(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root = _model_dir(tmp_path)
    (root / "backup" / "worker-1").mkdir(parents=True)  # another local task's: not ours to fsync
    calls: list[str] = []
    real = {name: getattr(files, name) for name in ("fsync_tree", "fsync_dir", "write_manifest")}
    monkeypatch.setattr(files, "fsync_tree", lambda p: calls.append(f"fsync_tree {Path(p).name}")
                        or real["fsync_tree"](p))
    monkeypatch.setattr(files, "fsync_dir", lambda p: calls.append(f"fsync_dir {Path(p).name}")
                        or real["fsync_dir"](p))
    monkeypatch.setattr(files, "write_manifest", lambda p, entries=None: calls.append("manifest")
                        or real["write_manifest"](p, entries))
    real_done = artifacts.write_done
    monkeypatch.setattr(artifacts, "write_done", lambda p, s: calls.append("done") or real_done(p, s))
    artifacts.finalize(root, {})
    order = [c for c in calls if c in ("manifest", "done") or c.startswith("fsync_tree")]
    assert order == ["fsync_tree checkpoints", "fsync_tree export", "manifest", "done"]
    assert calls.index(f"fsync_dir {root.name}") < calls.index("manifest")  # the model dir's entries too


def test_status_writer_throttles_and_carries_every_status_field(tmp_path: Path) -> None:
    w = artifacts.StatusWriter(str(tmp_path / "s.json"), "worker:1", interval=3600)
    assert w.update(force=True, state="training", epoch=1)
    assert not w.update(step=5)  # throttled, but remembered
    assert w.update(force=True, epoch=2, eta_seconds=12.5)
    data = json.loads((tmp_path / "s.json").read_text())
    assert set(contract.STATUS_FIELDS) <= set(data)
    assert data["task"] == "worker:1" and data["state"] == "training" and data["step"] == 5 and data["epoch"] == 2
    assert data["eta_seconds"] == 12.5 and data["loss"] is None
    assert data["updated_at"] > 0 and data["updated_at_iso"].endswith("Z")


def test_worker_temp_dir_is_per_task_and_recreated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    a = Path(artifacts.make_worker_temp_dir("worker:1", "/m"))
    (a / "junk").write_text("x")
    b = Path(artifacts.make_worker_temp_dir("worker:1", "/m"))
    assert a == b and a.parent == tmp_path and not (b / "junk").exists()
    assert artifacts.worker_temp_dir("worker:2", "/m") != a
    assert artifacts.backup_dir_for("/m", "worker:1") == "/m/backup/worker-1"


class _Imds(http.server.BaseHTTPRequestHandler):
    notice: str | None = None

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_PUT(self) -> None:
        ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        self._send(200 if ok else 400, "tok" if ok else "")

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != "tok":
            self._send(401)
        elif type(self).notice is None:
            self._send(404)
        else:
            self._send(200, type(self).notice)


@pytest.fixture
def imds() -> Iterator[str]:
    _Imds.notice = None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_imds_no_notice_then_notice(imds: str) -> None:
    client = spot.Imds(imds)
    assert client.available()
    assert client.instance_action() is None
    _Imds.notice = json.dumps({"action": "terminate", "time": "2026-01-01T00:00:00Z"})
    assert client.instance_action() == spot.Notice("terminate", "2026-01-01T00:00:00Z")


def test_watcher_sets_event_and_calls_back(imds: str) -> None:
    seen: list[spot.Notice] = []
    watcher = spot.SpotWatcher(spot.Imds(imds), interval=0.05, on_notice=seen.append).start()
    assert not watcher.event.wait(0.2)
    _Imds.notice = json.dumps({"action": "stop", "time": "t"})
    assert watcher.event.wait(5)
    assert seen == [spot.Notice("stop", "t")]
    watcher.stop()


@pytest.mark.parametrize(("body", "expected"), [
    ('{"action": "hibernate", "time": "t"}', spot.Notice("hibernate", "t")),
    ("not json", None), ('{"time": "t"}', None), ("[]", None),
])
def test_parse_notice(body: str, expected: spot.Notice | None) -> None:
    assert spot.parse_notice(body) == expected


def test_start_watcher_modes(imds: str) -> None:
    assert spot.start_watcher("off", imds, 1) is None
    started = time.monotonic()
    gone = spot.start_watcher("auto", "http://127.0.0.1:9", 1)  # nothing listening: the watcher ends by itself
    assert gone is not None and time.monotonic() - started < 0.5  # the probe runs in the watcher's thread
    gone._thread.join(5)
    assert not gone.active
    request = stop.StopRequest()
    watcher = spot.start_watcher("auto", imds, 0.05, request)
    assert watcher is not None and watcher.active
    _Imds.notice = json.dumps({"action": "terminate", "time": "t"})
    assert request.event.wait(5) and request.reason == stop.PREEMPTED
    assert request.detail == "spot interruption notice: terminate at t"
    watcher.stop()
