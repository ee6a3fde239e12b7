"""A job's own writable home on a host, and the S3 dataset cache the job writes. Standard library only.

Inside the unit the file system is read-only (``ProtectSystem=strict``) but for the paths the unit names; programs
write under ``$HOME`` (Keras' dataset cache, TFDS, Hugging Face, matplotlib, CUDA's JIT cache) and the built-in
trainer caches ``--data s3://...`` under ``$TFCLUSTER_DATASETS/s3``. So every job gets:

* its home ``<prefix>/var/lib/tfcluster/jobs/<job>/home``, owned by the job user, with the cache directories of
  ``contract.JOB_HOME_ENV`` (the role writes those variables into the env file, the unit makes the home writable);
* the Keras dataset cache filled from the host's verified datasets, so ``keras.datasets.mnist.load_data()`` runs
  without a download: Keras 3 looks in ``$KERAS_HOME/datasets``, tf-keras in ``~/.keras/datasets`` (it ignores
  KERAS_HOME), so ``KERAS_HOME`` is ``$HOME/.keras``. Keras checks the file against the sha256 it pins for its own
  download (:data:`KERAS_DATASETS`) and downloads again on any other file, so only a file with exactly that sha256
  is placed; another one (the same arrays written by another zip writer) is reported and left out;
* ``<datasets>/s3``, owned by the job user, in the root-owned datasets dir.

The home lies in the job user's own directory (``/var/lib/tfcluster`` is its home), so everything in it is made by
a child process running as the job user: root never follows a path the job controls. The S3 cache is made by root
inside the root-owned datasets dir, opened without following a link.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.contract import JOB_HOME_ENV
from ..core.files import sha256_file
from .asuser import run_as
from .jobspec import JobError

HOME_MODE = 0o750
# dataset name (DATASETS=NAME, <datasets>/NAME.npz) -> (the file Keras' loader asks get_file for, the sha256 it pins):
# keras.datasets.mnist.load_data() in Keras 3.15 (keras/src/datasets/mnist.py) and tf-keras 2.21.
KERAS_DATASETS: dict[str, tuple[str, str]] = {
    "mnist": ("mnist.npz", "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"),
}
KERAS_CACHE = os.path.join(".keras", "datasets")  # under the home: Keras 3 ($KERAS_HOME) and tf-keras (~/.keras)
S3_CACHE = "s3"  # under the datasets dir: trainer/s3.py's cache_dir/s3/BUCKET/KEY


def home_env(home: str) -> dict[str, str]:
    """The job's home variables (contract.JOB_HOME_ENV) for ``home``."""
    return {name: os.path.join(home, rel) if rel else home for name, rel in JOB_HOME_ENV.items()}


def home_dirs(home: str) -> list[str]:
    """The directories the home holds from the start, parents first."""
    wanted = {home, os.path.join(home, KERAS_CACHE), *home_env(home).values()}
    return sorted(wanted, key=lambda p: (p.count(os.sep), p))


def keras_files(datasets_dir: str, names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """({source file: its name in the Keras cache}, notes): the requested datasets Keras has a loader for whose file
    is the one that loader accepts (its pinned sha256); a note for each that is not."""
    files: dict[str, str] = {}
    notes: list[str] = []
    for name in sorted(set(names)):
        if name not in KERAS_DATASETS:
            continue
        target, want = KERAS_DATASETS[name]
        source = os.path.join(datasets_dir, f"{name}.npz")
        if not os.path.isfile(source):
            notes.append(f"{source} is missing: keras.datasets.{name}.load_data() would download")
            continue
        got = sha256_file(source)
        if got != want:
            notes.append(f"{source} is not the {target} Keras pins (sha256 {got[:12]}, Keras checks {want[:12]}): "
                         f"keras.datasets.{name}.load_data() would download it; read {source} with numpy "
                         f"(np.load(os.environ['TFCLUSTER_DATASETS'] + '/{name}.npz')) on hosts without internet")
            continue
        files[source] = target
    return files, notes


def _same_file(path: str, sha256: str) -> bool:
    return os.path.isfile(path) and not os.path.islink(path) and sha256_file(path) == sha256


def prepare_here(home: str, files: Mapping[str, str]) -> dict[str, Any]:
    """Create the home's directories and copy ``files`` into its Keras cache, as whoever runs this."""
    created, copied = [], []
    for path in home_dirs(home):
        if not os.path.isdir(path):
            os.makedirs(path, mode=HOME_MODE, exist_ok=True)
            created.append(path)
    cache = os.path.join(home, KERAS_CACHE)
    for source, name in sorted(files.items()):
        target = os.path.join(cache, name)
        if _same_file(target, sha256_file(source)):
            continue
        partial = f"{target}.tfcluster-partial"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        with open(source, "rb") as src, open(partial, "xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        os.chmod(partial, 0o640)
        os.replace(partial, target)
        copied.append(target)
    return {"created": created, "copied": copied}


def _ids(user: str, group: str | None) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(user)
        return entry.pw_uid, (grp.getgrnam(group).gr_gid if group else entry.pw_gid)
    except KeyError as error:
        raise JobError(f"job user/group {user}:{group} does not exist on this host. Fix: run site.yml (the trainer "
                       "role creates them)") from error


def _in_child(uid: int, gid: int, home: str, files: Mapping[str, str]) -> dict[str, Any]:
    """:func:`prepare_here` in a child running as ``uid``:``gid``; its result comes back through a pipe."""
    result = run_as(uid, gid, lambda: prepare_here(home, files), umask=0o027,
                    what="the process that makes the job's home")
    if "error" in result:
        raise JobError(f"the job's home {home} cannot be made as the job user (uid {uid}): {result['error']}. Fix: "
                       f"the job user must own {os.path.dirname(os.path.dirname(os.path.dirname(home)))} (the "
                       "trainer role makes it its home); remove a file that stands where a directory belongs")
    return result


def own_dir(parent: str, name: str, uid: int, gid: int, mode: int = HOME_MODE) -> bool:
    """``parent/name`` as a directory owned by ``uid``:``gid``, made by root inside the root-owned ``parent``, never
    through a link. True when something changed."""
    with contextlib.suppress(FileExistsError):
        os.makedirs(parent, mode=0o755)
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise JobError(f"{parent} is not a directory of its own ({error.strerror}). Fix: remove it and run site.yml "
                       "(the dataset role makes it)") from error
    try:
        info = os.fstat(parent_fd)
        if os.geteuid() == 0 and (info.st_uid != 0 or info.st_mode & 0o022):
            raise JobError(f"{parent} must belong to root and be writable by root alone (uid {info.st_uid}, mode "
                           f"{info.st_mode & 0o7777:04o}). Fix: chown root:root {parent}; chmod 0755 {parent}")
        changed = False
        try:
            os.mkdir(name, mode, dir_fd=parent_fd)
            changed = True
        except FileExistsError:
            pass
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        try:
            now = os.fstat(fd)
            if (now.st_uid, now.st_gid) != (uid, gid):
                os.fchown(fd, uid, gid)
                changed = True
            if now.st_mode & 0o7777 != mode:
                os.fchmod(fd, mode)
                changed = True
        finally:
            os.close(fd)
        return changed
    finally:
        os.close(parent_fd)


def prepare(home: str, datasets_dir: str, keras_datasets: Sequence[str], user: str | None, group: str | None, *,
            check: bool = False) -> dict[str, Any]:
    """Make the job's home (as the job user when we are root), its Keras cache, and the S3 dataset cache. Returns
    {changed, created, copied, notes}."""
    files, notes = keras_files(datasets_dir, keras_datasets)
    if check:
        missing = [p for p in home_dirs(home) if not os.path.isdir(p)]
        stale = [name for source, name in files.items()
                 if not _same_file(os.path.join(home, KERAS_CACHE, name), sha256_file(source))]
        s3_missing = not os.path.isdir(os.path.join(datasets_dir, S3_CACHE))
        return {"changed": bool(missing or stale or s3_missing), "created": missing, "copied": stale, "notes": notes}
    if os.geteuid() == 0 and user:
        uid, gid = _ids(user, group)
        result = _in_child(uid, gid, home, files)
        s3_changed = own_dir(datasets_dir, S3_CACHE, uid, gid)
    else:
        result = prepare_here(home, files)
        s3_cache = os.path.join(datasets_dir, S3_CACHE)
        s3_changed = not os.path.isdir(s3_cache)
        os.makedirs(s3_cache, mode=HOME_MODE, exist_ok=True)
    changed = bool(result["created"] or result["copied"] or s3_changed)
    return {"changed": changed, "created": result["created"], "copied": result["copied"], "notes": notes}
