# Slot -> tag mapping, output order and the fixed security settings, planned against a mocked provider.

mock_provider "aws" {
  mock_data "aws_availability_zones" {
    defaults = { names = ["us-east-1a", "us-east-1b"] }
  }
  mock_data "aws_ec2_instance_type_offerings" {
    defaults = { instance_types = ["offered"] }
  }
}

variables {
  cluster_name      = "tftest"
  slots             = { worker = 2, chief = 1, evaluator = 1, ps = 1 }
  public_key        = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests test"
  allowed_ssh_cidrs = ["203.0.113.7/32"]
}

run "slots_become_tags" {
  command = plan

  assert {
    condition     = length(aws_instance.this) == 5
    error_message = "one instance per slot"
  }
  assert {
    condition     = aws_instance.this["worker-1"].tags[output.tag_keys.task_type] == "worker" && aws_instance.this["worker-1"].tags[output.tag_keys.task_index] == "1"
    error_message = "worker-1 must be tagged task_type=worker, task_index=1"
  }
  assert {
    condition     = aws_instance.this["chief-0"].tags[output.tag_keys.task_type] == "chief" && aws_instance.this["chief-0"].tags[output.tag_keys.task_index] == "0"
    error_message = "chief-0 must be tagged task_type=chief, task_index=0"
  }
  assert {
    condition     = alltrue([for k, i in aws_instance.this : i.tags[output.tag_keys.cluster] == "tftest" && i.tags["Name"] == "tftest-${k}"])
    error_message = "every instance carries the cluster tag and a Name of cluster-slot"
  }
  assert {
    condition     = alltrue([for k, i in aws_instance.this : "${i.tags[output.tag_keys.task_type]}-${i.tags[output.tag_keys.task_index]}" == k])
    error_message = "the tags of every instance must spell its for_each key"
  }
}

run "hosts_sorted_by_slot" {
  command = plan

  assert {
    condition     = [for h in output.hosts : h.name] == ["chief-0", "ps-0", "worker-0", "worker-1", "evaluator-0"]
    error_message = "hosts must be sorted chief, ps, worker, evaluator, then index"
  }
  assert {
    condition     = alltrue([for h in output.hosts : h.port == 2222 && h.connection == "ssh" && h.ssh_user == "ubuntu" && h.gpus == 1 && h.instance_type == "g5.xlarge"])
    error_message = "hosts carry port, connection, ssh_user, gpus and instance_type"
  }
}

run "many_workers_sort_numerically" {
  command = plan

  variables {
    slots = { worker = 12 }
  }

  assert {
    condition     = jsonencode([for h in output.hosts : h.task_index]) == jsonencode(range(12))
    error_message = "worker-10 must come after worker-9, not after worker-1"
  }
}

run "secure_defaults" {
  command = plan

  assert {
    condition     = alltrue([for i in aws_instance.this : i.metadata_options[0].http_tokens == "required"])
    error_message = "IMDSv2 must be required"
  }
  assert {
    condition     = alltrue([for i in aws_instance.this : i.root_block_device[0].encrypted && i.root_block_device[0].volume_type == "gp3"])
    error_message = "root volumes must be encrypted gp3"
  }
  assert {
    condition     = aws_security_group_rule.training_in.self && aws_security_group_rule.training_in.from_port == 2222 && aws_security_group_rule.training_in.to_port == 2222
    error_message = "the training port is open only to the group itself"
  }
  assert {
    condition     = length(aws_placement_group.this) == 0 && length(aws_spot_instance_request.this) == 0
    error_message = "placement group and spot are off by default"
  }
  assert {
    condition     = length(aws_vpc.this) == 1 && length(aws_default_security_group.this) == 1
    error_message = "without subnet_id the module creates a VPC and locks down its default security group"
  }
}

run "ssh_cidrs_and_key" {
  command = plan

  assert {
    condition     = jsonencode(aws_security_group_rule.ssh_in[0].cidr_blocks) == jsonencode(["203.0.113.7/32"]) && aws_security_group_rule.ssh_in[0].from_port == 22
    error_message = "SSH only from allowed_ssh_cidrs"
  }
  assert {
    condition     = length(aws_key_pair.this) == 1
    error_message = "a key pair is created from public_key"
  }
}

run "spot_placement_existing_subnet" {
  command = plan

  variables {
    slots           = { chief = 1, worker = 1 }
    spot            = { enabled = true, max_price = "1.50" }
    autostop_down   = "terminate"
    placement_group = true
    subnet_id       = "subnet-0123456789abcdef0"
    ami_id          = "ami-0123456789abcdef0"
    checkpoint_s3   = { bucket = "my-bucket", prefix = "ckpt/run1" }
  }

  override_data {
    target = data.aws_subnet.existing
    values = { availability_zone = "us-east-1b", vpc_id = "vpc-0123456789abcdef0" }
  }

  assert {
    condition     = length(aws_instance.this) == 0 && length(aws_spot_instance_request.this) == 2
    error_message = "spot hosts are spot instance requests"
  }
  assert {
    condition     = aws_spot_instance_request.this["worker-0"].tags[output.tag_keys.task_index] == "0" && aws_spot_instance_request.this["worker-0"].spot_price == "1.50"
    error_message = "spot requests carry the slot tags and max price"
  }
  assert {
    condition     = length(aws_ec2_tag.spot) == 2 * 7
    error_message = "each spot instance gets its 7 tags copied (cluster, task_type, task_index, port, gpus, ssh_user, Name)"
  }
  assert {
    condition     = aws_ec2_tag.spot["worker-0|tfcluster:task_type"].value == "worker"
    error_message = "the instance of a spot request is tagged with its slot"
  }
  assert {
    condition     = length(aws_placement_group.this) == 1 && aws_placement_group.this[0].strategy == "cluster"
    error_message = "placement_group = true creates a cluster placement group"
  }
  assert {
    condition     = length(aws_vpc.this) == 0 && aws_spot_instance_request.this["chief-0"].subnet_id == "subnet-0123456789abcdef0"
    error_message = "an existing subnet_id is used and no VPC is created"
  }
  assert {
    condition     = length(aws_iam_role_policy.checkpoints) == 2 && alltrue([for p in aws_iam_role_policy.checkpoints : alltrue([for s in jsondecode(p.policy).Statement : alltrue([for r in s.Resource : startswith(r, "arn:aws:s3:::my-bucket/ckpt/run1/") || r == "arn:aws:s3:::my-bucket"])])])
    error_message = "checkpoint_s3 grants access under the prefix only, one policy per slot"
  }
}

run "gpu_count_lookup" {
  command = plan

  variables {
    instance_type = "p4d.24xlarge"
  }

  assert {
    condition     = alltrue([for h in output.hosts : h.gpus == 8])
    error_message = "p4d.24xlarge has 8 GPUs"
  }
}
