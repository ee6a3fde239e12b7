"""aws source: running EC2 instances tagged ``tfcluster:cluster=<TFCLUSTER_CLUSTER>``, slot read from tags.

Uses boto3's DescribeInstances paginator. Region, profile, credentials and endpoint come from the usual AWS
environment (AWS_REGION / AWS_DEFAULT_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID..., AWS_ENDPOINT_URL or
AWS_ENDPOINT_URL_EC2), so tests point it at a local moto server. The client is injectable.

Tags read: tfcluster:task_type, tfcluster:task_index (required); tfcluster:port, tfcluster:gpus,
tfcluster:ssh_user (optional; port defaults to TFCLUSTER_BASE_PORT, gpus to 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from inventory.model import (
    TAG_CLUSTER,
    TAG_GPUS,
    TAG_PORT,
    TAG_SSH_USER,
    TAG_TASK_INDEX,
    TAG_TASK_TYPE,
    HostSpec,
    InventoryError,
    SourceResult,
)
from tfcluster.contract import Problem


def make_ec2_client() -> Any:
    """A boto3 EC2 client configured from the environment (botocore reads AWS_DEFAULT_REGION, we add AWS_REGION)."""
    import os

    import boto3

    return boto3.session.Session().client("ec2", region_name=os.environ.get("AWS_REGION") or None)


def _int_tag(value: str | None) -> object:
    """Tag text as int where it is one; otherwise the text itself (so validation names it)."""
    if value is None:
        return None
    text = value.strip()
    return int(text) if text.isdigit() else value


def instance_spec(instance: Mapping[str, Any], default_port: int) -> HostSpec:
    """One instance -> HostSpec; tags give the slot."""
    tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags", [])}
    private_ip = instance.get("PrivateIpAddress") or None
    public_ip = instance.get("PublicIpAddress") or None
    port = _int_tag(tags.get(TAG_PORT))
    gpus = _int_tag(tags.get(TAG_GPUS))
    return HostSpec(
        label=f"{instance.get('InstanceId', '?')} ({private_ip or public_ip or 'no IP'})",
        task_type=tags.get(TAG_TASK_TYPE),
        task_index=_int_tag(tags.get(TAG_TASK_INDEX)),
        address=public_ip or private_ip,
        tf_address=private_ip or public_ip,
        port=default_port if port is None else port,
        gpus=0 if gpus is None else gpus,
        connection="ssh",
        ssh_user=tags.get(TAG_SSH_USER),
    )


def describe_running(client: Any, cluster: str, page_size: int | None = None) -> Iterable[Mapping[str, Any]]:
    """Every running instance of the cluster, over all pages."""
    paginator = client.get_paginator("describe_instances")
    config = {"PageSize": page_size} if page_size else {}
    pages = paginator.paginate(
        Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]},
                 {"Name": "instance-state-name", "Values": ["running"]}],
        PaginationConfig=config,
    )
    for page in pages:
        for reservation in page.get("Reservations", []):
            yield from reservation.get("Instances", [])


def fetch_aws(cluster: str, default_port: int, client: Any = None, page_size: int | None = None) -> SourceResult:
    """HostSpecs of the cluster's running instances; AWS errors become one problem with the fix."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    try:
        ec2 = client if client is not None else make_ec2_client()
        instances = list(describe_running(ec2, cluster, page_size))
    except NoRegionError as exc:
        raise InventoryError([Problem("AWS_REGION", "no AWS region is set", "export AWS_REGION=us-east-1 "
                                      "(or AWS_DEFAULT_REGION, or a profile with a region)")]) from exc
    except NoCredentialsError as exc:
        raise InventoryError([Problem("AWS credentials", "no AWS credentials found",
                                      "export AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")]) from exc
    except (ClientError, BotoCoreError) as exc:
        raise InventoryError([Problem("EC2 DescribeInstances", f"failed: {exc}",
                                      "check AWS credentials, region and AWS_ENDPOINT_URL")]) from exc
    specs = tuple(instance_spec(i, default_port) for i in instances)
    return SourceResult(specs=specs, cluster_name=cluster,
                        empty_fix=f"no running instance is tagged {TAG_CLUSTER}={cluster}: run `make provision` "
                        "first, or check TFCLUSTER_CLUSTER and AWS_REGION")
