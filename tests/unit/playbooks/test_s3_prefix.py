"""The job's S3 prefix is the same in the two roles that use it: tf_job uploads to it (TFCLUSTER_CHECKPOINT_S3 =
PREFIX/<job>), the collector reads PREFIX/<job>/model/ from it when the chief is gone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "playbooks" / "collections" / "ansible_collections" / "tfcluster" / "cluster" / "roles"


def render(expression: str, variables: dict[str, object]) -> str:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    try:  # ansible-core >= 2.19 templates only trusted strings (the role's own defaults are)
        from ansible.template import trust_as_template
    except ImportError:
        def trust_as_template(value: str) -> str:
            return value
    return str(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))).strip()


@pytest.mark.parametrize(("given", "expected"), [("s3://bucket/runs", "s3://bucket/runs/j1"),
                                                 ("s3://bucket/runs//", "s3://bucket/runs/j1"),
                                                 ("", "")])
def test_tf_job_and_the_collector_agree_on_the_jobs_s3_prefix(given: str, expected: str) -> None:
    job = yaml.safe_load((ROLES / "tf_job" / "defaults" / "main.yml").read_text())["tf_job_checkpoint_s3"]
    collector = yaml.safe_load((ROLES / "collector" / "defaults" / "main.yml").read_text())["collector_checkpoint_s3"]
    variables = {"tfcluster_checkpoint_s3": given, "tf_job_name": "j1", "collector_job": "j1"}
    assert render(job, variables) == render(collector, variables) == expected
