"""aws source: running EC2 instances tagged ``tfcluster:cluster=<TFCLUSTER_CLUSTER>``, slot read from tags.

Uses boto3's DescribeInstances paginator. Region, profile, credentials and endpoint come from the usual AWS
environment (AWS_REGION / AWS_DEFAULT_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID..., AWS_ENDPOINT_URL or
AWS_ENDPOINT_URL_EC2), so tests point it at a local moto server. The client is injectable.

Tags read (keys from ``tfcluster.core.contract.TAG_KEYS``): task_type, task_index (required); port, gpus, ssh_user
(optional; port defaults to TFCLUSTER_PORT, else contract.TF_PORT; gpus to 0). Ansible connects to the public or
private IP as TFCLUSTER_CONNECT says (through TFCLUSTER_BASTION in bastion mode); TF_CONFIG uses the private IP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tfcluster.core.contract import TAG_KEYS, Problem
from tfcluster.inventory.access import pick_addresses
from tfcluster.inventory.fields import int_or_text
from tfcluster.inventory.fields import label as host_label
from tfcluster.inventory.model import PUBLIC, Access, HostSpec, InventoryError, SourceResult


def make_ec2_client() -> Any:
    """A boto3 EC2 client configured from the environment (botocore reads AWS_DEFAULT_REGION, we add AWS_REGION)."""
    import os

    import boto3

    return boto3.session.Session().client("ec2", region_name=os.environ.get("AWS_REGION") or None)


def instance_spec(instance: Mapping[str, Any], default_port: int, mode: str = "public") -> HostSpec:
    """One instance -> HostSpec; tags give the slot, TFCLUSTER_CONNECT's ``mode`` the address Ansible uses."""
    tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags", [])}
    private_ip = instance.get("PrivateIpAddress") or None
    public_ip = instance.get("PublicIpAddress") or None
    port = int_or_text(tags.get(TAG_KEYS["port"]))
    gpus = int_or_text(tags.get(TAG_KEYS["gpus"]))
    return HostSpec(
        # the IP only where it is one: an answer's text never reaches a message unchecked (its problem shows its repr)
        label=host_label(str(instance.get("InstanceId", "?")), private_ip, public_ip)
        if private_ip or public_ip else f"{instance.get('InstanceId', '?')} (no IP)",
        task_type=tags.get(TAG_KEYS["task_type"]),
        task_index=int_or_text(tags.get(TAG_KEYS["task_index"])),
        port=default_port if port is None else port,
        gpus=0 if gpus is None else gpus,
        connection="ssh",
        ssh_user=tags.get(TAG_KEYS["ssh_user"]),
        instance_type=instance.get("InstanceType"),
        **pick_addresses(mode, public_ip, private_ip, "TFCLUSTER_CONNECT"),
    )


def describe_running(client: Any, cluster: str, page_size: int | None = None) -> Iterable[Mapping[str, Any]]:
    """Every running instance of the cluster, over all pages."""
    paginator = client.get_paginator("describe_instances")
    config = {"PageSize": page_size} if page_size else {}
    pages = paginator.paginate(
        Filters=[{"Name": f"tag:{TAG_KEYS['cluster']}", "Values": [cluster]},
                 {"Name": "instance-state-name", "Values": ["running"]}],
        PaginationConfig=config,
    )
    for page in pages:
        for reservation in page.get("Reservations", []):
            yield from reservation.get("Instances", [])


def fetch_aws(cluster: str, default_port: int, access: Access = PUBLIC, client: Any = None,
              page_size: int | None = None) -> SourceResult:
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
    specs = tuple(instance_spec(i, default_port, access.mode) for i in instances)
    return SourceResult(specs=specs, cluster_name=cluster, access=access,
                        empty_fix=f"no running instance is tagged {TAG_KEYS['cluster']}={cluster}: run `make "
                        "provision` first, or check TFCLUSTER_CLUSTER and AWS_REGION")
