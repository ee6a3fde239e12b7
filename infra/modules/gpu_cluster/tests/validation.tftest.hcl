# Every validation refuses bad input at plan time (expect_failures), and the explicit escape hatches work.

mock_provider "aws" {}

variables {
  cluster_name = "tftest"
}

run "cluster_name_bad" {
  command = plan
  variables { cluster_name = "Bad_Name" }
  expect_failures = [var.cluster_name]
}

run "slots_unknown_type" {
  command = plan
  variables { slots = { workers = 2 } }
  expect_failures = [var.slots]
}

run "slots_zero_count" {
  command = plan
  variables { slots = { chief = 1, worker = 0 } }
  expect_failures = [var.slots]
}

run "slots_fractional_count" {
  command = plan
  variables { slots = { worker = 1.5 } }
  expect_failures = [var.slots]
}

run "slots_two_chiefs" {
  command = plan
  variables { slots = { chief = 2, worker = 1 } }
  expect_failures = [var.slots]
}

run "slots_nobody_trains" {
  command = plan
  variables { slots = { evaluator = 1 } }
  expect_failures = [var.slots]
}

run "slots_ps_without_chief" {
  command = plan
  variables { slots = { ps = 1, worker = 2 } }
  expect_failures = [var.slots]
}

run "slots_ps_mix_ok" {
  command = plan
  variables { slots = { chief = 1, ps = 2, worker = 2, evaluator = 1 } }
  assert {
    condition     = length(output.hosts) == 6
    error_message = "a valid parameter-server mix plans"
  }
}

run "instance_type_malformed" {
  command = plan
  variables { instance_type = "g5" }
  expect_failures = [var.instance_type]
}

run "instance_type_not_gpu" {
  command = plan
  variables { instance_type = "m5.large" }
  expect_failures = [var.instance_type]
}

run "instance_type_not_gpu_allowed" {
  command = plan
  variables {
    instance_type               = "m5.large"
    allow_non_gpu_instance_type = true
  }
  assert {
    condition     = alltrue([for h in output.hosts : h.gpus == 0])
    error_message = "a CPU type reports 0 GPUs"
  }
}

run "gpus_per_instance_fraction" {
  command = plan
  variables { gpus_per_instance = 1.5 }
  expect_failures = [var.gpus_per_instance]
}

run "ami_id_malformed" {
  command = plan
  variables { ami_id = "ubuntu-22.04" }
  expect_failures = [var.ami_id]
}

run "public_key_is_a_path" {
  command = plan
  variables { public_key = "~/.ssh/id_ed25519.pub" }
  expect_failures = [var.public_key]
}

run "public_key_and_key_name" {
  command = plan
  variables {
    public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests test"
    key_name   = "existing"
  }
  expect_failures = [var.public_key]
}

run "ssh_cidr_malformed" {
  command = plan
  variables { allowed_ssh_cidrs = ["10.0.0.300/32"] }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_cidr_without_prefix" {
  command = plan
  variables { allowed_ssh_cidrs = ["203.0.113.7"] }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_from_anywhere_refused" {
  command = plan
  variables { allowed_ssh_cidrs = ["203.0.113.7/32", "0.0.0.0/0"] }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_from_anywhere_explicit" {
  command = plan
  variables {
    allowed_ssh_cidrs       = ["0.0.0.0/0"]
    allow_ssh_from_anywhere = true
  }
  assert {
    condition     = jsonencode(aws_security_group_rule.ssh_in[0].cidr_blocks) == jsonencode(["0.0.0.0/0"])
    error_message = "allow_ssh_from_anywhere lets 0.0.0.0/0 through"
  }
}

run "egress_cidr_malformed" {
  command = plan
  variables { egress_cidrs = ["anywhere"] }
  expect_failures = [var.egress_cidrs]
}

run "tf_port_privileged" {
  command = plan
  variables { tf_port = 80 }
  expect_failures = [var.tf_port]
}

run "tf_port_too_high" {
  command = plan
  variables { tf_port = 70000 }
  expect_failures = [var.tf_port]
}

run "spot_price_not_a_number" {
  command = plan
  variables { spot = { enabled = true, max_price = "cheap" } }
  expect_failures = [var.spot]
}

run "network_interface_id_malformed" {
  command = plan
  variables { network_interface_ids = { "worker-0" = "nic-1" } }
  expect_failures = [var.network_interface_ids]
}

run "network_interface_for_unknown_slot" {
  command = plan
  variables { network_interface_ids = { "worker-7" = "eni-0123456789abcdef0" } }
  expect_failures = [aws_instance.this]
}

run "root_volume_too_small" {
  command = plan
  variables { root_volume_size = 20 }
  expect_failures = [var.root_volume_size]
}

run "metadata_hop_limit_zero" {
  command = plan
  variables { metadata_hop_limit = 0 }
  expect_failures = [var.metadata_hop_limit]
}

run "subnet_id_malformed" {
  command = plan
  variables { subnet_id = "my-subnet" }
  expect_failures = [var.subnet_id]
}

run "vpc_cidr_too_big" {
  command = plan
  variables { vpc_cidr = "10.0.0.0/8" }
  expect_failures = [var.vpc_cidr]
}

run "checkpoint_bucket_is_uri" {
  command = plan
  variables { checkpoint_s3 = { bucket = "s3://my-bucket", prefix = "ckpt" } }
  expect_failures = [var.checkpoint_s3]
}

run "checkpoint_prefix_slashes" {
  command = plan
  variables { checkpoint_s3 = { bucket = "my-bucket", prefix = "/ckpt/" } }
  expect_failures = [var.checkpoint_s3]
}

run "reserved_tag_key" {
  command = plan
  variables { tags = { "tfcluster:cluster" = "other" } }
  expect_failures = [var.tags]
}
