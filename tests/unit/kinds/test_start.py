"""`make start` per kind (issue 22): every kind answers start and expires_at (the base refuses with a fix and knows
no expiry); the local kind starts its emulated instances only while the emulated endpoint runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfcluster.kinds import KINDS, KindError, Target
from tfcluster.kinds.local import Local
from tfcluster.provision import localaws


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_answers_start_and_expiry(name: str) -> None:
    kind = KINDS[name]
    assert callable(kind.start) and callable(kind.expires_at)


def test_local_start_needs_the_emulated_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localaws, "running", lambda directory, timeout=3.0: None)
    with pytest.raises(KindError, match=r"endpoint is not running: no local cluster exists\. Fix: `make provision`"):
        Local().start(Target(kind="local", name="tfcluster-local", tf_dir=tmp_path))
