"""tfcluster/provision/awscheck.py and the pure parts of tfcluster/provision/aws.py: what CLUSTER=aws refuses before
Terraform runs, and what an AWS error during apply tells the user to do next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore import exceptions as bce

from tfcluster.provision import aws as provision_aws
from tfcluster.provision import awscheck
from tfcluster.provision.awscheck import Target
from tfcluster.provision.local import ProvisionError

# ---- settings as Terraform resolves them ---------------------------------------------------------------------------

def test_root_settings_follow_terraforms_precedence(tmp_path: Path) -> None:
    (tmp_path / "variables.tf").write_text(
        'variable "region" {\n  type    = string\n  default = "us-east-1"\n}\n\n'
        'variable "profile" {\n  type    = string\n  default = null\n}\n\n'
        'variable "instance_type" {\n  default = "g5.xlarge"\n}\n')
    assert awscheck.root_settings(tmp_path, {}) == {"region": "us-east-1", "profile": None,
                                                    "instance_type": "g5.xlarge"}
    env = {"TF_VAR_region": "eu-west-1", "TF_VAR_instance_type": "p4d.24xlarge"}
    (tmp_path / "terraform.tfvars").write_text('region = "us-west-2"  # mine\nprofile = "ml"\nslots = { worker = 4 }\n')
    (tmp_path / "b.auto.tfvars").write_text('availability_zone = "us-west-2b"\n')
    settings = awscheck.root_settings(tmp_path, env, ["availability_zone=us-west-2c", "slots={}"])
    assert settings == {"region": "us-west-2", "profile": "ml", "instance_type": "p4d.24xlarge",
                        "availability_zone": "us-west-2c"}


def test_root_settings_of_the_real_root(aws_root: Path) -> None:
    settings = awscheck.root_settings(aws_root, {})
    assert settings["region"] == "us-east-1" and settings["instance_type"] == "g5.xlarge"


def test_no_region_anywhere_is_one_line_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(awscheck.AwsCheckError) as caught:
        awscheck.target_of({"region": None}, {}, lambda _p: None, tmp_path)
    message = str(caught.value)
    assert message.startswith("no AWS region") and "\n" not in message
    assert 'Fix: region = "us-east-1" in' in message and "AWS_REGION" in message
    target = awscheck.target_of({"region": None}, {"AWS_PROFILE": "ml"}, lambda p: "eu-north-1" if p == "ml" else None,
                                tmp_path)
    assert target == Target(region="eu-north-1", profile="ml", instance_type="g5.xlarge", zone=None)


# ---- credentials ---------------------------------------------------------------------------------------------------

class Creds:
    def __init__(self, method: str, error: Exception | None = None) -> None:
        self.method, self.error = method, error

    def get_frozen_credentials(self) -> None:
        if self.error:
            raise self.error


class Session:
    def __init__(self, creds: Any = None, error: Exception | None = None, config: dict[str, Any] | None = None):
        self.creds, self.error, self.full_config = creds, error, config or {}

    def get_credentials(self) -> Any:
        if self.error:
            raise self.error
        return self.creds


SSO_SESSION = {"profiles": {"ml": {"sso_session": "corp", "sso_account_id": "1", "sso_role_name": "Admin"}}}


@pytest.mark.parametrize(("session", "profile", "mirror", "expected"), [
    (Session(Creds("env")), None, False, None),
    (Session(Creds("sso"), config=SSO_SESSION), "ml", False, None),  # current providers read sso_session
    (Session(None), None, False, "no AWS credentials found (environment, AWS_PROFILE"),
    (Session(error=bce.ProfileNotFound(profile="ml")), "ml", False, "AWS profile 'ml' is not in ~/.aws/config"),
    (Session(Creds("sso", bce.SSOTokenLoadError(error_msg="expired"))), "ml", False,
     "the SSO login of AWS profile 'ml' is missing or expired. Fix: `aws sso login --profile ml`"),
    (Session(Creds("sso"), config=SSO_SESSION), "ml", True,
     "AWS profile 'ml' uses an sso_session, which the offline mirror's aws provider 3.39 cannot read "
     "(https://github.com/hashicorp/terraform-provider-aws/issues/28263)"),
    (Session(Creds("shared-credentials-file")), "ml", True, None),
])
def test_credentials_problem(session: Session, profile: str | None, mirror: bool, expected: str | None) -> None:
    problem = awscheck.credentials_problem(session, profile, mirror)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(expected), problem
        assert "Fix:" in problem and "\n" not in problem


# ---- instance type offerings ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("instance_type", "patterns"), [
    ("g5.xlarge", ["g5.*", "g4dn.xlarge", "g6.xlarge", "g6e.xlarge"]),
    ("p5.48xlarge", ["p5.*", "p3.48xlarge", "p4d.48xlarge", "p4de.48xlarge", "p5e.48xlarge", "p5en.48xlarge"]),
    ("m5.large", ["m5.*"]),
])
def test_similar_patterns(instance_type: str, patterns: list[str]) -> None:
    assert awscheck.similar_patterns(instance_type) == patterns


G5 = {"g5.xlarge": ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"]}


@pytest.mark.parametrize(("target", "offered", "similar", "expected"), [
    (Target("us-east-1", None, "g5.xlarge", None), G5, {}, None),
    (Target("us-east-1", None, "g5.xlarge", "us-east-1b"), G5, {}, None),
    (Target("us-east-1", None, "g5.xlarge", "us-east-1e"), G5, {},
     "availability_zone us-east-1e does not offer g5.xlarge; zones of us-east-1 that do: us-east-1a, us-east-1b, "
     "us-east-1c, us-east-1d, us-east-1f. Fix: set availability_zone to one of them, or leave it null"),
    (Target("eu-south-2", None, "p5.48xlarge", None), {}, {"p4d.24xlarge": ["eu-south-2a"], "p5.4xlarge": []},
     "no zone of eu-south-2 offers instance_type p5.48xlarge; similar types offered there: p4d.24xlarge "
     "(eu-south-2a). Fix: set instance_type to one that is offered"),
    (Target("eu-south-2", None, "p5.48xlarge", None), {}, {},
     "no zone of eu-south-2 offers instance_type p5.48xlarge. Fix:"),
])
def test_offering_problem(target: Target, offered: dict[str, list[str]], similar: dict[str, list[str]],
                          expected: str | None) -> None:
    problem = awscheck.offering_problem(target, offered, similar)
    assert problem == expected if expected is None else problem.startswith(expected), problem


def test_offered_zones_from_moto_real_offering_data() -> None:
    """moto serves DescribeInstanceTypeOfferings from AWS's own data: us-east-1e has no g5."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
        offered = awscheck.offered_zones(ec2, ["g5.xlarge"])
        assert offered == G5
        similar = awscheck.offered_zones(ec2, awscheck.similar_patterns("g5.xlarge"))
    assert "g5.12xlarge" in similar and "g4dn.xlarge" in similar and "g5.xlarge" in similar


# ---- errors during apply -------------------------------------------------------------------------------------------

APPLY_OUTPUT = """
Error: creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have sufficient g5.xlarge capacity in
the Availability Zone you requested (us-east-1a). Our system will be working on provisioning additional capacity.
"""


@pytest.mark.parametrize(("text", "instance_type", "spot", "expected"), [
    (APPLY_OUTPUT, "g5.xlarge", False, ["InsufficientInstanceCapacity: AWS has no g5.xlarge capacity left in that "
                                        "zone right now. Next: set availability_zone to another zone"]),
    ("Error: VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit of 0 allows",
     "g5.xlarge", False, ["VcpuLimitExceeded: the cluster needs more vCPUs than the account's 'Running On-Demand G "
                          "and VT instances' quota in us-east-1. Next: Service Quotas console"]),
    ("VcpuLimitExceeded", "p4d.24xlarge", False, ["VcpuLimitExceeded: the cluster needs more vCPUs than the "
                                                  "account's 'Running On-Demand P instances' quota"]),
    ("Error: MaxSpotInstanceCountExceeded: Max spot instance count exceeded", "g5.xlarge", True,
     ["MaxSpotInstanceCountExceeded: the account's spot quota 'All G and VT Spot Instance Requests' in us-east-1"]),
    ("UnauthorizedOperation: You are not authorized", "g5.xlarge", False, ["UnauthorizedOperation: the credentials"]),
    ('profile "ml" is configured to use SSO but is missing required configuration: sso_region, sso_start_url',
     "g5.xlarge", False, ["is configured to use SSO but is missing required configuration: this aws provider cannot "
                          "read an sso_session profile"]),
    ("Error: some other failure", "g5.xlarge", False, []),
])
def test_explain_apply_errors(text: str, instance_type: str, spot: bool, expected: list[str]) -> None:
    advice = awscheck.explain(text, instance_type, "us-east-1", spot)
    assert len(advice) == len(expected)
    for line, start in zip(advice, expected, strict=True):
        assert line.startswith(start), line
        assert "Next:" in line and "{" not in line


@pytest.mark.parametrize(("instance_type", "spot", "quota"), [
    ("g5.xlarge", False, "Running On-Demand G and VT instances"),
    ("g6e.48xlarge", True, "All G and VT Spot Instance Requests"),
    ("p5.48xlarge", False, "Running On-Demand P instances"),
    ("m7i.large", False, "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("trn1.32xlarge", False, "Running On-Demand TRN instances"),
])
def test_quota_name(instance_type: str, spot: bool, quota: str) -> None:
    assert awscheck.quota_name(instance_type, spot) == quota


# ---- provision_aws: addresses, bastion, the twin guard ------------------------------------------------------------

HOSTS = [{"name": "worker-0", "instance_id": "i-0", "private_ip": "10.42.0.7", "public_ip": "3.1.1.1"},
         {"name": "worker-1", "instance_id": "i-1", "private_ip": "10.42.0.9", "public_ip": None}]


@pytest.mark.parametrize(("out", "expected"), [
    ({"hosts": HOSTS}, {"3.1.1.1": "i-0"}),  # old state without `connect`: public
    ({"hosts": HOSTS, "connect": "public"}, {"3.1.1.1": "i-0"}),
    ({"hosts": HOSTS, "connect": "private"}, {"10.42.0.7": "i-0", "10.42.0.9": "i-1"}),
    ({"hosts": HOSTS, "connect": "bastion"}, {"10.42.0.7": "i-0", "10.42.0.9": "i-1"}),
])
def test_known_hosts_are_keyed_by_the_address_ansible_uses(out: dict[str, Any], expected: dict[str, str]) -> None:
    assert provision_aws.ssh_addresses(out) == expected


def test_bastion_of() -> None:
    bastion = {"address": "3.2.2.2", "user": "ec2-user", "port": 2222}
    assert provision_aws.bastion_of({"connect": "bastion", "bastion": bastion}) == ("3.2.2.2", 2222)
    assert provision_aws.bastion_of({"connect": "bastion", "bastion": {"address": "3.2.2.2"}}) == ("3.2.2.2", 22)
    assert provision_aws.bastion_of({"connect": "private", "bastion": bastion}) is None
    assert provision_aws.bastion_of({"connect": "bastion", "bastion": None}) is None


def test_a_left_over_twin_override_stops_a_real_run(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text("")
    provision_aws.guard_twin_override(tmp_path, {})
    (tmp_path / "tfcluster_twin_override.tf").write_text("provider \"aws\" {}\n")
    with pytest.raises(ProvisionError, match=r"points the aws provider at an emulator .* Fix: if no twin test is "
                                             r"running, remove it: rm .*tfcluster_twin_override.tf"):
        provision_aws.guard_twin_override(tmp_path, {})
    provision_aws.guard_twin_override(tmp_path, {"TFCLUSTER_TWIN": "1"})


NOW = __import__("datetime").datetime(2025, 1, 31, 12, 0, tzinfo=__import__("datetime").timezone.utc)


@pytest.mark.parametrize(("env", "pairs"), [
    ({}, ["expires_at=2025-02-01T12:00:00Z"]),                     # aws: 24 h unless told
    ({"TTL": "2h", "DOWN": "1"}, ["expires_at=2025-01-31T14:00:00Z", "autostop_down=terminate"]),
    ({"TTL": "off", "DOWN": "0"}, ["autostop_down=stop"]),
])
def test_lifecycle_vars_from_ttl_and_down(env: dict[str, str], pairs: list[str]) -> None:
    assert provision_aws.lifecycle_vars({"expires_at", "autostop_down"}, env, NOW) == pairs
    assert provision_aws.lifecycle_vars(set(), env, NOW) == []  # a root without them gets none


def test_lifecycle_vars_refuse_a_bad_ttl() -> None:
    with pytest.raises(ProvisionError, match="TTL"):
        provision_aws.lifecycle_vars({"expires_at"}, {"TTL": "soon"}, NOW)


def test_the_real_root_declares_what_provision_passes(aws_root: Path) -> None:
    declared = awscheck.declared_variables(aws_root)
    assert {"expires_at", "autostop_down", "connect", "bastion", "key_name", "region", "instance_type"} <= declared
