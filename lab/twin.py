"""The AWS twin: the real `make provision|train|destroy CLUSTER=aws` against an emulated account whose instances are
lab hosts.

    twin = Twin(workdir); twin.start()            # moto seeded like an account; infra/aws pointed at it
    run = twin.make_async("provision")            # the real command, in the background
    instances = twin.wait_instances(2)            # what `terraform apply` launched (moto)
    lab = twin.boot_lab(instances, late=...)      # a lab host per instance at its private IP; keys on the console
    twin.wait(run); twin.make("train", JOB=...); twin.make("destroy"); twin.close()

    twin.apply_user_data(instances)               # play cloud-init: the boot guard's files and commands, from moto
    off = twin.watch_power_off(instances)         # a host that powered itself off: EC2 stops (or terminates) it
    twin.power_on(instances)                      # after `make start`: boot the stopped hosts again, disks kept

What differs from a real run, and nothing else: the endpoint and the credentials. `start()` writes
tfcluster_twin_override.tf into its root `tf_dir` (infra/aws; the suite gives it a copy of infra/ as committed,
passed as TFCLUSTER_TF_DIR, so the checkout's roots never change under the tests beside it) with the provider's
endpoints and skips (git-ignored, removed by `close()`; a real `make provision` refuses while it exists,
tfcluster/provision/aws.py), runs moto on a free loopback port with the account's seed (lab/twin_moto.py: an image
named like the Deep Learning Base GPU AMI via MOTO_AMIS_PATH, the key pair, real instance-type offerings per zone,
console output and AWS-like private addresses), and gives every command dummy credentials, AWS_ENDPOINT_URL
(boto3: preflight, console output, the destroy check) and TFCLUSTER_TF_MIRROR=1 (the offline provider 3.39 as a
development override: the committed lock file is untouched). The user's settings a real user would put in
terraform.tfvars come as TF_VAR_* (the twin refuses to run next to a real terraform.tfvars); one says what the
emulation lacks: the hosts have no GPU (gpus_per_instance = 0). State goes to a Terraform workspace of the twin in
a data dir of its own, so a real state of infra/aws in this checkout is never touched.

The lab plays the instances as the Deep Learning AMI would: Ubuntu's login user `ubuntu` with passwordless sudo
and the key pair's key, cloud-init's host-key block on the console, and (for `late`) an sshd that starts late.
A bastion lab host with a leg on a front bridge is the jump host of the bastion mode (`Lab.isolate()`).

The twin does not run cloud-init: `apply_user_data` reads each instance's user data back from moto (what Terraform
rendered) and does what cloud-init would with it on the lab host: write_files (gz+b64 decoded, modes), then runcmd.
It plays the hypervisor too: a lab host that powered itself off (its systemd-nspawn exited 0) is stopped in moto
(`watch_power_off`; terminated when its shutdown behaviour says so), and `power_on` boots a stopped host again with
its disk (the overlay: host keys, state and prepared stamp survive, as on an EBS root), its console showing no keys
(cloud-init prints them on the first boot only).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.config import LabError
from lab.lab import Lab
from lab.paths import REPO
from lab.twin_boot import RESTARTED_CONSOLE, TwinError, apply_cloud_config, cloud_init_console
from tfcluster.core.contract import TAG_KEYS, TF_PORT
from tfcluster.provision import localaws
from tfcluster.provision.common import TWIN_ENV, TWIN_OVERRIDE

REGION = "us-east-1"
CLUSTER = "tfcluster-twin"
KEY_PAIR = "tfcluster-twin"
WORKSPACE = "tfcluster-twin"
USER = "ubuntu"  # the Deep Learning AMI's login user (the root's ssh_user default)
# The image the root's aws_ami data source finds: the name pattern and owner of the AWS Deep Learning Base OSS
# Nvidia Driver GPU AMI (Ubuntu 22.04), x86_64 (moto answers `owners = ["amazon"]` for images it loads itself).
AMI = {"ami_id": "ami-0d1e2a3b4c5d6e7f8", "name": "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) "
       "20250214", "description": "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)",
       "owner_id": "898082745236", "public": True, "virtualization_type": "hvm", "architecture": "x86_64",
       "state": "available", "root_device_type": "ebs", "root_device_name": "/dev/sda1", "sriov": "simple",
       "creation_date": "2025-02-14T10:00:00.000Z", "hypervisor": "xen", "image_type": "machine"}
# Left behind by a real user; the twin would apply their settings to the emulator, or they would break it.
USER_FILES = ("terraform.tfvars", "terraform.tfvars.json", "backend.tf")


@dataclass
class MakeRun:
    target: str
    returncode: int
    output: str
    seconds: float

    def tail(self, lines: int = 60) -> str:
        return f"`make {self.target}` exited {self.returncode} after {self.seconds:.0f} s:\n" + "\n".join(
            self.output.splitlines()[-lines:])


@dataclass
class Twin:
    """One emulated AWS account for `make ... CLUSTER=aws` (see the module docstring)."""

    workdir: Path
    tf_dir: Path = REPO / "infra" / "aws"
    tf_vars: dict[str, str] = field(default_factory=dict)
    endpoint: localaws.Endpoint | None = None
    lab: Lab | None = None
    layer: Path | None = None  # the image's prepared runtime (lab/layers.py), when the test gives one

    # ---- the account -------------------------------------------------------------------------------------------

    @property
    def key(self) -> Path:
        """The key pair's private key (the user's ~/.ssh/KEY.pem)."""
        return self.workdir / "keypair" / "id_ed25519"

    @property
    def console_dir(self) -> Path:
        return self.workdir / "console"

    @property
    def override(self) -> Path:
        return self.tf_dir / TWIN_OVERRIDE

    @property
    def user_known_hosts(self) -> Path:
        """The user's own known_hosts (where a bastion they already use is found)."""
        return self.workdir / "user_known_hosts"

    def start(self) -> Twin:
        left = [name for name in (*USER_FILES, TWIN_OVERRIDE) if (self.tf_dir / name).exists()]
        left += [p.name for p in self.tf_dir.glob("*.auto.tfvars")]
        if left:
            raise TwinError(f"{self.tf_dir} holds {', '.join(left)}: the twin applies that root with its own settings "
                            "and would take these along. Fix: move them aside while the twin runs, or run it in a "
                            "clean clone (a left-over tfcluster_twin_override.tf can simply be removed)")
        for path in (self.console_dir, self.key.parent):
            path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", KEY_PAIR, "-f", str(self.key)],
                       check=True)
        amis = self.workdir / "amis.json"
        amis.write_text(json.dumps([AMI]))
        env = {**os.environ, "MOTO_AMIS_PATH": str(amis), "TFCLUSTER_TWIN_CONSOLE_DIR": str(self.console_dir),
               "PYTHONPATH": str(REPO)}
        self.endpoint = localaws.start(self.workdir / "moto", free_port(),
                                       command=[sys.executable, "-m", "lab.twin_moto"], env=env)
        self.ec2().import_key_pair(KeyName=KEY_PAIR, PublicKeyMaterial=self.key.with_suffix(".pub").read_bytes())
        self.override.write_text(render_override(self.endpoint.url))
        self.user_known_hosts.write_text("")
        # gpus_per_instance = 0: the lab hosts playing g5.xlarge have no GPU, so they say so (as a user of a CPU
        # image would); the instance type, its offerings and the AMI lookup stay the real ones.
        self.tf_vars = {"cluster_name": CLUSTER, "key_name": KEY_PAIR, "connect": "private",
                        "allowed_ssh_cidrs": '["10.42.0.0/16"]', "gpus_per_instance": "0"}
        for args in (["get"], ["workspace", "new", WORKSPACE]):  # state of the twin's own, never the checkout's
            self.terraform(args)
        return self

    def ec2(self) -> Any:
        assert self.endpoint is not None
        return localaws.ec2_client(self.endpoint.url)

    def env(self) -> dict[str, str]:
        """What `make ... CLUSTER=aws` gets: the emulator's endpoint and dummy credentials, and the user's
        settings."""
        assert self.endpoint is not None
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_VAR_", "TFCLUSTER_"))}
        return {**base, **localaws.DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint.url,
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(self.workdir / "aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(self.workdir / "aws-credentials"),
                "TF_DATA_DIR": str(self.workdir / "tf-data"), "TFCLUSTER_TF_MIRROR": "1", TWIN_ENV: "1",
                "TFCLUSTER_CLUSTER": CLUSTER, "TFCLUSTER_TF_DIR": str(self.tf_dir), "TFCLUSTER_HOST_KEY_TIMEOUT": "300",
                "TFCLUSTER_USER_KNOWN_HOSTS": str(self.user_known_hosts),
                "ANSIBLE_PRIVATE_KEY_FILE": str(self.key),
                **{f"TF_VAR_{k}": v for k, v in self.tf_vars.items()}}

    def terraform(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        from tfcluster.provision import terraform as toolchain

        env = toolchain.terraform_env(self.env(), provider=toolchain.REGISTRY)  # infra/aws; offline: TF_MIRROR
        proc = subprocess.run([*toolchain.terraform_command(), f"-chdir={self.tf_dir}", *args], env=env, text=True,
                              capture_output=True, check=False)
        if proc.returncode != 0:
            raise TwinError(f"terraform {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    # ---- the real commands ---------------------------------------------------------------------------------------

    def make_async(self, target: str, env: Mapping[str, str] | None = None,
                   **variables: str) -> tuple[subprocess.Popen[str], Path, float, str]:
        """``env``: added to :meth:`env` (e.g. a fresh ANSIBLE_SSH_CONTROL_PATH_DIR: no reused SSH connection)."""
        log = self.workdir / f"make-{target}-{int(time.time() * 1000)}.log"
        argv = ["make", "-C", str(REPO), target, "CLUSTER=aws", *(f"{k}={v}" for k, v in variables.items())]
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True,
                                    env={**self.env(), **(env or {})},
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        return proc, log, time.monotonic(), target

    def wait(self, started: tuple[subprocess.Popen[str], Path, float, str], timeout: float = 900) -> MakeRun:
        proc, log, t0, target = started
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)
        return MakeRun(target, proc.returncode, log.read_text(errors="replace"), time.monotonic() - t0)

    def make(self, target: str, timeout: float = 900, env: Mapping[str, str] | None = None,
             **variables: str) -> MakeRun:
        return self.wait(self.make_async(target, env, **variables), timeout)

    # ---- instances are lab hosts -----------------------------------------------------------------------------

    def instances(self) -> list[dict[str, Any]]:
        """Live instances of the cluster, in slot order (from their tags)."""
        found = localaws.live_instances(self.ec2(), CLUSTER)
        tags = [{t["Key"]: t["Value"] for t in i.get("Tags", [])} for i in found]
        return sorted(({**i, "tags": t} for i, t in zip(found, tags, strict=True)),
                      key=lambda i: (i["tags"].get(TAG_KEYS["task_type"], ""),
                                     int(i["tags"].get(TAG_KEYS["task_index"], 0))))

    def wait_instances(self, count: int, timeout: float = 300) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [i for i in self.instances() if i["State"]["Name"] == "running"]
            if len(found) >= count:
                return found
            time.sleep(0.5)
        raise TwinError(f"{count} instances of {CLUSTER} were not running within {timeout:.0f} s")

    def subnet_of(self, instance: Mapping[str, Any]) -> dict[str, Any]:
        return self.ec2().describe_subnets(SubnetIds=[instance["SubnetId"]])["Subnets"][0]

    def boot_lab(self, instances: Sequence[Mapping[str, Any]], *, late: Mapping[str, int] | None = None,
                 name: str = "twin", layers: Sequence[Path] = ()) -> Lab:
        """One lab host per instance at its private IP (names `tw-<slot>`), a bastion, the AMI's user and key;
        then each instance's console shows its host keys. ``late``: {slot: seconds} sshd starts late."""
        subnet = self.subnet_of(instances[0])["CidrBlock"]
        slots = [i["tags"][TAG_KEYS["task_type"]] for i in instances]
        names = [lab_name(i) for i in instances]
        delays = {lab_name(i): (late or {}).get(slot_of(i), 0) for i in instances}
        self.lab = Lab(slots=slots, name=name, names=names, subnet=subnet, port=TF_PORT,
                       addresses=[i["PrivateIpAddress"] for i in instances], bastion="tw-bastion", user=USER,
                       user_key=self.key.with_suffix(".pub").read_text(),
                       sshd_delay={k: v for k, v in delays.items() if v}, layers=layers)
        try:
            self.lab.start()
        except BaseException:
            self.lab.down()
            raise
        keys = self.lab.host_keys()
        for instance in instances:
            (self.console_dir / instance["InstanceId"]).write_text(cloud_init_console(keys[lab_name(instance)]))
        return self.lab

    def use_bastion(self) -> None:
        """Bastion mode: the lab's members only through the bastion; the user knows the bastion's key already."""
        assert self.lab is not None and self.lab.bastion is not None
        bastion = self.lab.bastion
        self.lab.isolate()
        key = self.lab.host_keys()[bastion.name].split()[:2]
        self.user_known_hosts.write_text(f"{bastion.front_address} {' '.join(key)}\n")
        # The module checks that allowed_ssh_cidrs admits bastion.address (it cannot know the bastion's private
        # address); a user adds that address, as the twin does.
        self.tf_vars |= {"connect": "bastion",
                         "bastion": f'{{ address = "{bastion.front_address}", user = "{USER}", port = 22 }}',
                         "allowed_ssh_cidrs": f'["10.42.0.0/16", "{bastion.front_address}/32"]'}

    # ---- cloud-init and the hypervisor -------------------------------------------------------------------------

    def user_data(self, instance_id: str) -> str:
        """The instance's user data as EC2 holds it (decoded)."""
        value = self.ec2().describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        raw = value.get("UserData", {}).get("Value") or ""
        return base64.b64decode(raw).decode("utf-8") if raw else ""

    def apply_user_data(self, instances: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """Do on each instance's lab host what cloud-init does with its user data (write_files, then runcmd, as
        root); {lab host: when it was done}."""
        assert self.lab is not None
        done = {}
        for instance in instances:
            apply_cloud_config(self.lab, lab_name(instance), self.user_data(instance["InstanceId"]))
            done[lab_name(instance)] = time.time()
        return done

    def watch_power_off(self, instances: Sequence[Mapping[str, Any]], timeout: float = 600) -> dict[str, float]:
        """Wait until each instance's lab host powered itself off; each is then stopped in moto (terminated when
        its shutdown behaviour is terminate), as EC2 does. {lab host: when its systemd-nspawn exited}."""
        assert self.lab is not None
        before = {lab_name(i): self._power_offs(lab_name(i)) for i in instances}
        off: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while len(off) < len(instances) and time.monotonic() < deadline:
            for instance in instances:
                name = lab_name(instance)
                ends = self._power_offs(name)
                if name not in off and len(ends) > len(before[name]):
                    off[name] = ends[-1]
                    self._hypervisor_off(instance["InstanceId"])
            time.sleep(1)
        return off

    def _power_offs(self, name: str) -> list[float]:
        assert self.lab is not None
        try:
            lines = self.lab.paths.bootlog(name).read_text().splitlines()
        except OSError:
            return []
        return [float(line.split()[0]) for line in lines if line.endswith(" exited 0")]

    def _hypervisor_off(self, instance_id: str) -> None:
        ec2 = self.ec2()
        behavior = ec2.describe_instance_attribute(InstanceId=instance_id,
                                                   Attribute="instanceInitiatedShutdownBehavior")
        if behavior.get("InstanceInitiatedShutdownBehavior", {}).get("Value") == "terminate":
            ec2.terminate_instances(InstanceIds=[instance_id])
        else:
            ec2.stop_instances(InstanceIds=[instance_id])

    def power_on(self, instances: Sequence[Mapping[str, Any]], timeout: float = 300) -> None:
        """Boot the lab hosts of instances that EC2 runs again (after `make start`), their disks kept; the console
        shows a boot without host keys."""
        assert self.lab is not None
        deadline = time.monotonic() + timeout
        ids = [i["InstanceId"] for i in instances]
        while time.monotonic() < deadline:
            reply = self.ec2().describe_instances(InstanceIds=ids)
            states = {i["InstanceId"]: i["State"]["Name"] for r in reply["Reservations"] for i in r["Instances"]}
            if all(state == "running" for state in states.values()):
                break
            time.sleep(1)
        else:
            raise TwinError(f"instances {ids} were not running within {timeout:.0f} s (did `make start` run?)")
        names = [lab_name(i) for i in instances]
        for instance in instances:
            (self.console_dir / instance["InstanceId"]).write_text(RESTARTED_CONSOLE)
            # Lab has no public call to boot a powered-off host again: its own boot, with the same overlay.
            self.lab.start_host(lab_name(instance))
        self.lab.wait_ready(names)

    def lose(self, instance: Mapping[str, Any]) -> None:
        """An instance lost as AWS loses one (a spot reclaim without notice, a failed host): terminated in EC2, its
        lab host powered off at once."""
        assert self.lab is not None
        self.ec2().terminate_instances(InstanceIds=[instance["InstanceId"]])
        self.lab.stop_host(lab_name(instance), grace=0)

    def replaced(self, lost: Mapping[str, Any], run: tuple[subprocess.Popen[str], Path, float, str],
                 timeout: float = 600) -> dict[str, Any]:
        """Play the new instance of a lost one's slot (what `terraform apply -replace` launched): a fresh lab host in
        the lost one's place at the new private address (the image's layers below a new disk), its host keys on the
        new instance's console. The new instance. ``run``: the make that recovers (its log if it ends first)."""
        assert self.lab is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if run[0].poll() is not None:
                tail = "\n".join(run[1].read_text(errors="replace").splitlines()[-60:])
                raise TwinError(f"make {run[3]} exited {run[0].returncode} before slot {slot_of(lost)} had a new "
                                f"instance:\n{tail}")
            found = [i for i in self.instances() if slot_of(i) == slot_of(lost)
                     and i["InstanceId"] != lost["InstanceId"] and i["State"]["Name"] in ("pending", "running")]
            if found:
                new = found[0]
                key = self.lab.reinstall(lab_name(lost), new["PrivateIpAddress"])
                (self.console_dir / new["InstanceId"]).write_text(cloud_init_console(key))
                return new
            time.sleep(1)
        tail = "\n".join(run[1].read_text(errors="replace").splitlines()[-60:])
        raise TwinError(f"no new instance of slot {slot_of(lost)} within {timeout:.0f} s (did the recovery run?)\n"
                        f"{tail}")

    def close(self) -> None:
        """Lab down, emulator stopped, the override and the twin's workspace state gone. Safe to call again."""
        errors = []
        if self.lab is not None:
            try:
                self.lab.down()
            except LabError as exc:
                errors.append(str(exc))
        localaws.stop(self.workdir / "moto")
        self.override.unlink(missing_ok=True)
        shutil.rmtree(self.tf_dir / "terraform.tfstate.d" / WORKSPACE, ignore_errors=True)
        with_state = self.tf_dir / "terraform.tfstate.d"
        if with_state.is_dir() and not any(with_state.iterdir()):
            with_state.rmdir()
        if errors:
            raise TwinError("\n".join(errors))


def slot_of(instance: Mapping[str, Any]) -> str:
    tags = instance["tags"]
    return f"{tags[TAG_KEYS['task_type']]}-{tags[TAG_KEYS['task_index']]}"


def lab_name(instance: Mapping[str, Any]) -> str:
    return f"tw-{slot_of(instance)}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def render_override(url: str) -> str:
    """The only difference from a real run, in Terraform: the provider talks to the emulator."""
    endpoints = "\n".join(f'    {service} = "{url}"' for service in ("ec2", "iam", "s3", "sts"))
    return ("# Written by the AWS twin test (lab/twin.py) while it runs; removed after. Never commit it.\n"
            'provider "aws" {\n'
            "  skip_credentials_validation = true\n"
            "  skip_requesting_account_id  = true\n"
            "  skip_metadata_api_check     = true\n"
            f"  endpoints {{\n{endpoints}\n  }}\n"
            "}\n")
