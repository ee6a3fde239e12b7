"""CLUSTER=aws before and after Terraform runs: credentials, region and instance-type checks, and what an AWS error
during apply means for the user.

`preflight()` runs before `terraform init/plan/apply` on CLUSTER=aws and refuses, in one line naming what is
missing and how to set it: no credentials in botocore's chain (environment, profiles, SSO, process, instance role),
no region, an `sso_session` profile while the offline 3.39 provider is in use (terraform-provider-aws#28263), an
instance type that no zone of the region offers (naming the types that are offered), or a pinned zone that does
not offer it (naming the zones that do). `explain()` maps the AWS errors an apply can hit (capacity, quotas, spot,
credentials) to the next step to take. The message functions are pure; the AWS calls take an injected client.

The settings are read the way Terraform would resolve them for the root: TF_VAR_<name>, then terraform.tfvars,
terraform.tfvars.json and *.auto.tfvars in lexical order, then -var, over the root's variable defaults. Only simple
`name = "string"` assignments are read; anything else leaves the default (Terraform itself still has the last word).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEYS = ("region", "profile", "instance_type", "availability_zone")
_ASSIGN = re.compile(r'^\s*(?P<key>[A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"(?P<value>[^"]*)"|(?P<null>null))\s*(?:#.*)?$',
                     re.M)
_VARIABLE = re.compile(r'variable\s+"(?P<key>[A-Za-z_][A-Za-z0-9_-]*)"\s*\{(?P<body>.*?)\n\}', re.S)
SSO_BUG = "https://github.com/hashicorp/terraform-provider-aws/issues/28263"
# Instance families that carry the same accelerators, for "similar types that are offered".
GPU_SIBLINGS: tuple[tuple[str, ...], ...] = (
    ("g4dn", "g5", "g6", "g6e"), ("p3", "p4d", "p4de", "p5", "p5e", "p5en"), ("g5g",), ("g4ad",),
)


class AwsCheckError(RuntimeError):
    """A check failed before Terraform ran; the message names what is missing and the fix."""


@dataclass(frozen=True)
class Target:
    """Where an apply will go: region, profile (None: the default chain), instance type, pinned zone."""

    region: str | None
    profile: str | None
    instance_type: str
    zone: str | None


def _assignments(text: str) -> dict[str, str | None]:
    return {m["key"]: (None if m["null"] else m["value"]) for m in _ASSIGN.finditer(text)}


def variable_defaults(tf_dir: Path) -> dict[str, str | None]:
    """`default = "..."` / `default = null` of the root's variables (simple string defaults only)."""
    out: dict[str, str | None] = {}
    for path in sorted(tf_dir.glob("*.tf")):
        for match in _VARIABLE.finditer(path.read_text(errors="replace")):
            found = _assignments(match["body"])
            if "default" in found:
                out[match["key"]] = found["default"]
    return out


def declared_variables(tf_dir: Path) -> set[str]:
    """Names of the root's input variables."""
    return {m["key"] for path in tf_dir.glob("*.tf") for m in _VARIABLE.finditer(path.read_text(errors="replace"))}


def root_settings(tf_dir: Path, env: Mapping[str, str], extra: Sequence[str] = ()) -> dict[str, str | None]:
    """The values of KEYS as Terraform would resolve them (see the module docstring). A root variable that
    defaults to null falls back to the default of the gpu_cluster module beside it (the root passes it on)."""
    module = {k: v for k, v in variable_defaults(tf_dir.parent / "modules" / "gpu_cluster").items() if k in KEYS}
    values: dict[str, str | None] = {k: v if v is not None else module.get(k)
                                     for k, v in variable_defaults(tf_dir).items() if k in KEYS}
    values |= {k: env[f"TF_VAR_{k}"] for k in KEYS if f"TF_VAR_{k}" in env}
    files = [tf_dir / "terraform.tfvars", tf_dir / "terraform.tfvars.json", *sorted(tf_dir.glob("*.auto.tfvars"))]
    for path in files:
        if not path.is_file():
            continue
        if path.suffix == ".json":
            try:
                found = {k: v for k, v in json.loads(path.read_text()).items() if isinstance(v, str) or v is None}
            except (ValueError, AttributeError):
                continue
        else:
            found = _assignments(path.read_text(errors="replace"))
        values |= {k: v for k, v in found.items() if k in KEYS}
    for pair in extra:
        key, _, value = pair.partition("=")
        if key in KEYS:
            values[key] = None if value == "null" else value
    return values


def target_of(settings: Mapping[str, str | None], env: Mapping[str, str], profile_region: Callable[[str | None], Any],
              tf_dir: Path) -> Target:
    """The apply's target; raises when no region can be found (the provider's own fallbacks included)."""
    profile = settings.get("profile") or env.get("AWS_PROFILE") or None
    region = (settings.get("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
              or profile_region(profile) or None)
    if not region:
        raise AwsCheckError(f"no AWS region: region is null in {tf_dir} and neither AWS_REGION nor the profile sets "
                            f'one. Fix: region = "us-east-1" in {tf_dir / "terraform.tfvars"} (or export AWS_REGION)')
    return Target(region=region, profile=profile, instance_type=settings.get("instance_type") or "g5.xlarge",  # module
                  zone=settings.get("availability_zone") or None)


def credentials_problem(session: Any, profile: str | None, mirror: bool) -> str | None:
    """Why botocore's credential chain gives no usable credentials for `profile`, or None.

    `session` is a botocore Session for the profile (injected: tests pass a stand-in)."""
    from botocore import exceptions as bce  # botocore comes with boto3 on every control machine

    name = profile or "default"
    login = f"aws sso login --profile {name}"
    try:
        credentials = session.get_credentials()
        method = getattr(credentials, "method", "") if credentials is not None else ""
        if credentials is not None and method == "sso":
            credentials.get_frozen_credentials()  # an SSO token is only read here: expired tokens fail now
    except bce.ProfileNotFound:
        return f"AWS profile {name!r} is not in ~/.aws/config. Fix: `aws configure --profile {name}` or " \
               f"`aws configure sso --profile {name}`, or set profile in terraform.tfvars / AWS_PROFILE to one that is"
    except (bce.SSOTokenLoadError, bce.UnauthorizedSSOTokenError, bce.TokenRetrievalError, bce.SSOError):
        return f"the SSO login of AWS profile {name!r} is missing or expired. Fix: `{login}`"
    except bce.BotoCoreError as exc:
        return f"AWS credentials of profile {name!r} cannot be loaded: {exc}. Fix: check ~/.aws/config"
    if credentials is None:
        return ("no AWS credentials found (environment, AWS_PROFILE, ~/.aws/credentials, ~/.aws/config, SSO, instance "
                "role). Fix: `aws configure`, or `aws configure sso` then `aws sso login`, or export AWS_PROFILE=NAME")
    if mirror and method == "sso" and _uses_sso_session(session, profile):
        return (f"AWS profile {name!r} uses an sso_session, which the offline mirror's aws provider 3.39 cannot read "
                f"({SSO_BUG}). Fix: use the registry provider (unset TFCLUSTER_TF_MIRROR), or export the credentials: "
                f'eval "$(aws configure export-credentials --profile {name} --format env)"')
    return None


def _uses_sso_session(session: Any, profile: str | None) -> bool:
    try:
        return bool(session.full_config.get("profiles", {}).get(profile or "default", {}).get("sso_session"))
    except AttributeError:
        return False


def similar_patterns(instance_type: str) -> list[str]:
    """Instance-type filter values for "similar types": the same family, and the same size in sibling families."""
    family, _, size = instance_type.partition(".")
    siblings = next((group for group in GPU_SIBLINGS if family in group), (family,))
    return [f"{family}.*", *(f"{other}.{size}" for other in siblings if other != family)]


def offered_zones(ec2: Any, types: Sequence[str]) -> dict[str, list[str]]:
    """{instance type: sorted zones of the client's region that offer it} for the names or patterns in `types`.

    One exact name is asked with a filter; patterns (`g5.*`) are matched here over every offering of the region
    (filter wildcards are not served by every endpoint)."""
    exact = len(types) == 1 and not any(ch in types[0] for ch in "*?[")
    filters = [{"Name": "instance-type", "Values": list(types)}] if exact else []
    found: dict[str, set[str]] = {}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone",
                                                                          Filters=filters)
    for page in pages:
        for offer in page.get("InstanceTypeOfferings", []):
            if exact or any(fnmatch.fnmatchcase(offer["InstanceType"], pattern) for pattern in types):
                found.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    return {name: sorted(zones) for name, zones in sorted(found.items())}


def offering_problem(target: Target, offered: Mapping[str, Sequence[str]],
                     similar: Mapping[str, Sequence[str]]) -> str | None:
    """Why `target` cannot launch, from the offerings of its type (`offered`) and of similar types, or None."""
    zones = list(offered.get(target.instance_type, ()))
    if not zones:
        others = [f"{name} ({', '.join(z)})" for name, z in similar.items() if name != target.instance_type and z]
        hint = f"; similar types offered there: {'; '.join(others[:8])}" if others else ""
        return (f"no zone of {target.region} offers instance_type {target.instance_type}{hint}. Fix: set "
                "instance_type to one that is offered, or region to one that offers it")
    if target.zone and target.zone not in zones:
        return (f"availability_zone {target.zone} does not offer {target.instance_type}; zones of {target.region} "
                f"that do: {', '.join(zones)}. Fix: set availability_zone to one of them, or leave it null (the "
                "root then picks one that offers it)")
    return None


# ---- errors during apply -------------------------------------------------------------------------------------------

QUOTA_HELP = ("Service Quotas console → Amazon EC2 → '{quota}' in {region} (or `aws service-quotas "
              "list-service-quotas --service-code ec2 --region {region}`), request an increase to at least the vCPUs "
              "of the whole cluster")


def quota_name(instance_type: str, spot: bool) -> str:
    """The EC2 vCPU quota an instance type counts against."""
    family = instance_type.split(".", 1)[0]
    if family.startswith(("g", "vt")):
        group = "G and VT"
    elif family.startswith("p"):
        group = "P"
    elif family.startswith(("inf", "trn", "dl", "x", "f")):
        group = family.rstrip("0123456789").upper()
    else:
        group = "Standard (A, C, D, H, I, M, R, T, Z)"
    return f"All {group} Spot Instance Requests" if spot else f"Running On-Demand {group} instances"


# (error code or text, what it means and the next step). {type}, {region}, {od_quota}, {spot_quota} are filled in.
APPLY_ERRORS: tuple[tuple[str, str], ...] = (
    ("InsufficientInstanceCapacity", "AWS has no {type} capacity left in that zone right now. Next: set "
     "availability_zone to another zone that offers it, retry later, or use a capacity reservation / another type"),
    ("VcpuLimitExceeded", "the cluster needs more vCPUs than the account's '{od_quota}' quota in {region}. Next: "
     + QUOTA_HELP.format(quota="{od_quota}", region="{region}") + "; or use fewer/smaller instances"),
    ("InstanceLimitExceeded", "the account's instance quota for {type} in {region} is used up. Next: "
     + QUOTA_HELP.format(quota="{od_quota}", region="{region}")),
    ("MaxSpotInstanceCountExceeded", "the account's spot quota '{spot_quota}' in {region} is used up. Next: "
     + QUOTA_HELP.format(quota="{spot_quota}", region="{region}") + "; or turn spot off (spot.enabled = false)"),
    ("SpotMaxPriceTooLow", "spot.max_price is below the current spot price of {type}. Next: raise spot.max_price or "
     "leave it null (pay up to the on-demand price)"),
    ("InsufficientFreeAddressesInSubnet", "the subnet has no free addresses. Next: use a larger subnet_id / vpc_cidr"),
    ("Unsupported", "{type} is not supported with these settings in that zone. Next: `make plan` shows the zone; set "
     "availability_zone to a zone that offers the type"),
    ("OptInRequired", "the account is not subscribed to this image or region. Next: accept the AMI's terms in the AWS "
     "Marketplace or enable the region in the account settings"),
    ("PendingVerification", "AWS is still verifying this account for this region. Next: wait (usually minutes, at most "
     "4 hours) or use a region already enabled"),
    ("UnauthorizedOperation", "the credentials are not allowed to do this. Next: use a role with EC2/VPC/IAM write "
     "permissions (decode the message with `aws sts decode-authorization-message`)"),
    ("AuthFailure", "AWS refused the credentials. Next: check AWS_PROFILE / `aws sts get-caller-identity`"),
    ("ExpiredToken", "the credentials expired. Next: `aws sso login` (or renew the session) and run again"),
    ("is configured to use SSO but is missing required configuration", "this aws provider cannot read an "
     "sso_session profile (" + SSO_BUG + "). Next: use a current provider from the registry (unset "
     "TFCLUSTER_TF_MIRROR; `make tf-upgrade CLUSTER=aws`), or export the credentials with `aws configure "
     "export-credentials --format env`"),
    ("InvalidKeyPair.NotFound", "key_name names no key pair in {region}. Next: create or import it there, or set "
     "public_key instead"),
    ("InvalidAMIID", "the AMI does not exist in {region}. Next: leave ami_id null (the Deep Learning AMI is looked "
     "up) or give an AMI of this region"),
    ("RequestLimitExceeded", "AWS throttled the API calls. Next: run the same command again in a minute"),
)


def explain(text: str, instance_type: str, region: str | None, spot: bool = False) -> list[str]:
    """The meaning and next step of every known AWS error in `text` (Terraform's output), in table order."""
    fill = {"type": instance_type, "region": region or "the region", "od_quota": quota_name(instance_type, False),
            "spot_quota": quota_name(instance_type, True)}
    return [f"{code}: {advice.format(**fill)}" for code, advice in APPLY_ERRORS if code in text]


# ---- the whole preflight --------------------------------------------------------------------------------------------

def preflight(tf_dir: Path, env: Mapping[str, str], extra: Sequence[str], *, mirror: bool) -> Target:
    """Every check before Terraform runs on CLUSTER=aws; returns the target, raises AwsCheckError with the fix."""
    import boto3
    import botocore.session
    from botocore import exceptions as bce

    settings = root_settings(tf_dir, env, extra)

    def profile_region(profile: str | None) -> str | None:
        try:
            return botocore.session.Session(profile=profile).get_config_variable("region")
        except bce.ProfileNotFound:
            return None

    target = target_of(settings, env, profile_region, tf_dir)
    session = botocore.session.Session(profile=target.profile)
    problem = credentials_problem(session, target.profile, mirror)
    if problem:
        raise AwsCheckError(problem)
    ec2 = boto3.Session(botocore_session=session, region_name=target.region).client("ec2")
    try:
        offered = offered_zones(ec2, [target.instance_type])
        similar = offered_zones(ec2, similar_patterns(target.instance_type)) if not offered else {}
    except (bce.ClientError, bce.BotoCoreError) as exc:
        advice = explain(str(exc), target.instance_type, target.region)
        raise AwsCheckError(f"DescribeInstanceTypeOfferings in {target.region} failed: {exc}"
                            + (f" ({advice[0]})" if advice else "")) from None
    problem = offering_problem(target, offered, similar)
    if problem:
        raise AwsCheckError(problem)
    return target
