# Issue 22: instances that stay put (the AMI decided once and kept; AMI=refresh replaces them), capacity inputs,
# gp3 throughput and IOPS, the instance store, and the optional data bucket and KMS keys in the per-slot roles.

mock_provider "aws" {
  mock_data "aws_availability_zones" {
    defaults = { names = ["us-east-1a", "us-east-1b"] }
  }
  mock_data "aws_ec2_instance_type_offerings" {
    defaults = { instance_types = ["offered"] }
  }
  mock_data "aws_ami" {
    defaults = { id = "ami-0aaaaaaaaaaaaaaaa", name = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260101", creation_date = "2026-01-01T00:00:00.000Z" }
  }
  mock_data "aws_ec2_instance_type" {
    defaults = { instance_storage_supported = true, total_instance_storage = 250 }
  }
}

variables {
  cluster_name      = "tftest"
  key_name          = "existing"
  allowed_ssh_cidrs = ["203.0.113.7/32"]
}

# --- the AMI: decided once, kept, refreshed only on request ---------------------------------------------------------
run "first_apply_takes_the_newest_image" {
  command = apply

  assert {
    condition     = terraform_data.ami.input == "ami-0aaaaaaaaaaaaaaaa" && output.ami_id == "ami-0aaaaaaaaaaaaaaaa" && alltrue([for i in aws_instance.this : i.ami == "ami-0aaaaaaaaaaaaaaaa"])
    error_message = "the first apply decides the AMI: the newest lookup result"
  }
  assert {
    condition     = jsonencode(output.ami_in_use) == jsonencode(["ami-0aaaaaaaaaaaaaaaa"]) && output.ami_latest.id == "ami-0aaaaaaaaaaaaaaaa" && startswith(output.ami_latest.name, "Deep Learning Base OSS ")
    error_message = "ami_in_use and ami_latest agree: no newer image"
  }
}

run "a_newer_image_does_not_move_the_hosts" {
  command = plan
  override_data {
    target = data.aws_ami.deep_learning[0]
    values = { id = "ami-0bbbbbbbbbbbbbbbb", name = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260201", creation_date = "2026-02-01T00:00:00.000Z" }
  }
  variables { slots = { worker = 3 } }

  assert {
    condition     = output.ami_latest.id == "ami-0bbbbbbbbbbbbbbbb" && output.ami_id == "ami-0aaaaaaaaaaaaaaaa" && jsonencode(output.ami_in_use) == jsonencode(["ami-0aaaaaaaaaaaaaaaa"])
    error_message = "make plan can tell: ami_latest is newer than ami_in_use, and the cluster keeps its AMI"
  }
  assert {
    condition     = aws_instance.this["worker-0"].ami == "ami-0aaaaaaaaaaaaaaaa" && aws_instance.this["worker-2"].ami == "ami-0aaaaaaaaaaaaaaaa"
    error_message = "running hosts stay put, and a slot added later gets the cluster's AMI, not the newer one"
  }
}

run "a_changed_ami_id_is_flagged_not_applied" {
  command = plan
  variables { ami_id = "ami-0cccccccccccccccc" }
  expect_failures = [check.ami_pinned]

  assert {
    condition     = output.ami_id == "ami-0aaaaaaaaaaaaaaaa" && aws_instance.this["worker-1"].ami == "ami-0aaaaaaaaaaaaaaaa" && output.ami_latest == null
    error_message = "a new ami_id reaches the hosts only with AMI=refresh; the check warns (and no lookup runs)"
  }
}

run "ami_refresh_replaces_every_host" {
  command = plan
  override_data {
    target = data.aws_ami.deep_learning[0]
    values = { id = "ami-0bbbbbbbbbbbbbbbb", name = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260201", creation_date = "2026-02-01T00:00:00.000Z" }
  }
  plan_options {
    replace = [terraform_data.ami]
  }

  assert {
    condition     = terraform_data.ami.input == "ami-0bbbbbbbbbbbbbbbb" && alltrue([for i in aws_instance.this : i.ami == "ami-0bbbbbbbbbbbbbbbb"])
    error_message = "AMI=refresh (-replace=module.cluster.terraform_data.ami) decides again and every host gets the newest image"
  }
}

# --- capacity ------------------------------------------------------------------------------------------------------
run "capacity_for_a_root_that_launches" {
  command = plan
  variables {
    launch_instances = false
    instance_type    = "p5.48xlarge"
    capacity         = { reservation_id = "cr-0123456789abcdef0", capacity_block = true }
  }

  assert {
    condition     = output.launch.capacity.reservation_id == "cr-0123456789abcdef0" && output.launch.capacity.capacity_block && output.launch.capacity.preference == "open"
    error_message = "the launch output carries capacity to infra/examples/efa"
  }
}

run "capacity_open_by_default" {
  command = plan

  assert {
    condition     = output.launch.capacity.preference == "open" && output.launch.capacity.reservation_id == null && !output.launch.capacity.capacity_block && length(aws_instance.this) == 2
    error_message = "open by default: the module launches (an open reservation matching type and zone is used anyway)"
  }
}

run "capacity_bad_preference" {
  command = plan
  variables { capacity = { preference = "targeted" } }
  expect_failures = [var.capacity]
}

run "capacity_bad_reservation_id" {
  command = plan
  variables {
    launch_instances = false
    capacity         = { reservation_id = "my-reservation" }
  }
  expect_failures = [var.capacity]
}

run "capacity_reservation_and_none" {
  command = plan
  variables {
    launch_instances = false
    capacity         = { reservation_id = "cr-0123456789abcdef0", preference = "none" }
  }
  expect_failures = [var.capacity]
}

run "capacity_block_without_id" {
  command = plan
  variables {
    launch_instances = false
    capacity         = { capacity_block = true }
  }
  expect_failures = [var.capacity]
}

run "capacity_with_spot" {
  command = plan
  variables {
    launch_instances = false
    spot             = { enabled = true }
    autostop_down    = "terminate"
    checkpoint_s3    = { bucket = "my-bucket", prefix = "ckpt" }
    capacity         = { reservation_id = "cr-0123456789abcdef0" }
  }
  expect_failures = [var.capacity]
}

run "capacity_needs_the_newer_root" {
  command = plan
  variables { capacity = { preference = "none" } }
  expect_failures = [var.capacity]
}

# --- root volume ---------------------------------------------------------------------------------------------------
run "gp3_throughput_and_iops" {
  command = plan
  variables {
    root_volume_throughput = 1000
    root_volume_iops       = 4000
  }

  assert {
    condition     = aws_instance.this["worker-0"].root_block_device[0].throughput == 1000 && aws_instance.this["worker-0"].root_block_device[0].iops == 4000 && aws_instance.this["worker-0"].root_block_device[0].volume_type == "gp3"
    error_message = "throughput and IOPS reach every gp3 root volume"
  }
  assert {
    condition     = output.launch.root_volume.throughput == 1000 && output.launch.root_volume.iops == 4000
    error_message = "and the launch output"
  }
}

run "gp3_defaults_are_the_baseline" {
  command = plan

  assert {
    condition     = output.launch.root_volume.throughput == null && output.launch.root_volume.iops == null
    error_message = "null: gp3's baseline (125 MiB/s, 3000 IOPS), chosen by EC2"
  }
}

run "throughput_below_gp3" {
  command = plan
  variables { root_volume_throughput = 100 }
  expect_failures = [var.root_volume_throughput]
}

run "throughput_over_the_iops_ratio" {
  command = plan
  variables { root_volume_throughput = 1000 }
  expect_failures = [var.root_volume_throughput]
}

run "iops_over_gp3" {
  command = plan
  variables { root_volume_iops = 20000 }
  expect_failures = [var.root_volume_iops]
}

# --- instance store (disks: the data source's instance_disks blocks, which mocks cannot fill) -----------------------
run "instance_store_from_the_type" {
  command = plan

  assert {
    condition     = output.instance_store.supported && output.instance_store.total_gb == 250 && output.instance_store.mount == "/opt/dlami/nvme"
    error_message = "the type's NVMe instance store and where the Deep Learning AMI mounts it"
  }
}

run "no_instance_store" {
  command = plan
  override_data {
    target = data.aws_ec2_instance_type.this
    values = { instance_storage_supported = false, total_instance_storage = 0, instance_disks = [] }
  }

  assert {
    condition     = !output.instance_store.supported && output.instance_store.mount == null
    error_message = "no instance store: no mount"
  }
}

# --- data bucket, KMS ----------------------------------------------------------------------------------------------
run "data_bucket_read_only_per_slot" {
  command = plan
  variables {
    slots   = { chief = 1, worker = 1 }
    data_s3 = { bucket = "my-datasets", prefix = "mnist", kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d" }
  }

  assert {
    condition     = toset(keys(aws_iam_role_policy.data)) == toset(["chief-0", "worker-0"])
    error_message = "every slot's role may read the data prefix"
  }
  assert {
    condition     = jsonencode([for s in jsondecode(aws_iam_role_policy.data["worker-0"].policy).Statement : [s.Sid, s.Action, s.Resource]]) == jsonencode([["ListDataPrefix", ["s3:ListBucket"], ["arn:aws:s3:::my-datasets"]], ["ReadData", ["s3:GetObject"], ["arn:aws:s3:::my-datasets/mnist/*"]], ["DataKeyThroughS3", ["kms:Decrypt"], ["arn:aws:kms:us-east-1:123456789012:key/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"]]])
    error_message = "list the prefix, get its objects, decrypt with its key: nothing more"
  }
  assert {
    condition     = jsondecode(aws_iam_role_policy.data["chief-0"].policy).Statement[0].Condition.StringLike["s3:prefix"] == ["mnist/*", "mnist"] && jsondecode(aws_iam_role_policy.data["chief-0"].policy).Statement[2].Condition.StringLike["kms:ViaService"] == "s3.*.amazonaws.com"
    error_message = "the listing is limited to the prefix, the key to S3's use"
  }
}

run "data_bucket_whole" {
  command = plan
  variables { data_s3 = { bucket = "my-datasets" } }

  assert {
    condition     = length(jsondecode(aws_iam_role_policy.data["worker-1"].policy).Statement) == 2 && jsondecode(aws_iam_role_policy.data["worker-1"].policy).Statement[1].Resource == ["arn:aws:s3:::my-datasets/*"] && !can(jsondecode(aws_iam_role_policy.data["worker-1"].policy).Statement[0].Condition)
    error_message = "prefix \"\": the whole bucket, read only, no KMS statement without a key"
  }
}

run "no_data_bucket_no_policy" {
  command = plan

  assert {
    condition     = length(aws_iam_role_policy.data) == 0
    error_message = "no data_s3: no data policy"
  }
}

run "checkpoint_key_for_the_prefix_only" {
  command = plan
  variables {
    slots         = { chief = 1, worker = 1 }
    checkpoint_s3 = { bucket = "my-bucket", prefix = "ckpt", kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/mrk-0123456789abcdef0123456789abcdef" }
  }

  assert {
    condition     = alltrue([for slot, p in aws_iam_role_policy.checkpoints : one([for s in jsondecode(p.policy).Statement : s if s.Sid == "CheckpointKeyThroughS3"]).Action == ["kms:Decrypt", "kms:GenerateDataKey"]])
    error_message = "every host may decrypt and generate data keys with the checkpoint key (uploads and downloads)"
  }
  assert {
    condition     = one([for s in jsondecode(aws_iam_role_policy.checkpoints["worker-0"].policy).Statement : s if s.Sid == "CheckpointKeyThroughS3"]).Condition.StringLike["kms:EncryptionContext:aws:s3:arn"] == ["arn:aws:s3:::my-bucket/ckpt/*", "arn:aws:s3:::my-bucket"]
    error_message = "only for objects under the checkpoint prefix (or the bucket's S3 Bucket Key)"
  }
}

run "checkpoint_key_not_an_arn" {
  command = plan
  variables { checkpoint_s3 = { bucket = "my-bucket", prefix = "ckpt", kms_key_arn = "alias/my-key" } }
  expect_failures = [var.checkpoint_s3]
}

run "data_bucket_uri" {
  command = plan
  variables { data_s3 = { bucket = "s3://my-datasets" } }
  expect_failures = [var.data_s3]
}

run "data_prefix_slash" {
  command = plan
  variables { data_s3 = { bucket = "my-datasets", prefix = "/mnist/" } }
  expect_failures = [var.data_s3]
}

run "data_key_not_an_arn" {
  command = plan
  variables { data_s3 = { bucket = "my-datasets", kms_key_arn = "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d" } }
  expect_failures = [var.data_s3]
}
