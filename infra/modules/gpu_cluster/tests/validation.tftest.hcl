# Every validation refuses bad input at plan time (expect_failures), and the explicit escape hatches work.

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
  key_name          = "existing"
  allowed_ssh_cidrs = ["203.0.113.7/32"]
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

run "no_ssh_key_at_all" {
  command = plan
  variables { key_name = null }
  expect_failures = [var.public_key]
}

run "no_ssh_key_but_user_data_installs_one" {
  command = plan
  variables {
    key_name  = null
    user_data = "#cloud-config\nssh_authorized_keys: [\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests test\"]\n"
  }
  assert {
    condition     = length(aws_key_pair.this) == 0 && strcontains(aws_instance.this["worker-0"].user_data, "ssh_authorized_keys")
    error_message = "user_data that installs a key is a way in"
  }
}

run "no_ssh_cidr_nobody_could_reach" {
  command = plan
  variables { allowed_ssh_cidrs = [] }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "no_key_and_no_ssh_cidr" {
  command = plan
  variables {
    key_name          = null
    allowed_ssh_cidrs = []
  }
  expect_failures = [var.public_key, var.allowed_ssh_cidrs]
}

run "ssh_user_with_shell_characters" {
  command = plan
  variables { ssh_user = "ubuntu;id" }
  expect_failures = [var.ssh_user]
}

run "ami_owners_empty" {
  command = plan
  variables { ami_owners = [] }
  expect_failures = [var.ami_owners]
}

run "connect_unknown" {
  command = plan
  variables { connect = "vpn" }
  expect_failures = [var.connect]
}

run "connect_bastion_without_bastion" {
  command = plan
  variables { connect = "bastion" }
  expect_failures = [var.connect]
}

run "bastion_malformed" {
  command = plan
  variables {
    connect = "bastion"
    bastion = { address = "jump host;id", user = "ec2-user" }
  }
  expect_failures = [var.bastion]
}

run "bastion_private_address_not_admitted" {
  command = plan
  variables {
    connect           = "bastion"
    bastion           = { address = "10.42.0.200", user = "ec2-user" }
    allowed_ssh_cidrs = ["10.42.1.0/24"]
  }
  expect_failures = [var.bastion]
}

run "public_without_public_ip" {
  command = plan
  variables { associate_public_ip = false }
  expect_failures = [var.associate_public_ip]
}

run "zone_and_subnet_both_set" {
  command = plan
  variables {
    availability_zone = "us-east-1a"
    subnet_id         = "subnet-0123456789abcdef0"
  }
  override_data {
    target = data.aws_subnet.existing
    values = { availability_zone = "us-east-1a", vpc_id = "vpc-0123456789abcdef0" }
  }
  expect_failures = [var.availability_zone]
}

run "autostop_down_unknown" {
  command = plan
  variables { autostop_down = "hibernate" }
  expect_failures = [var.autostop_down]
}

run "spot_cannot_stop" {
  command = plan
  variables {
    spot                 = { enabled = true }
    spot_without_backups = true
  }
  expect_failures = [var.autostop_down]
}

run "expires_at_not_utc" {
  command = plan
  variables { expires_at = "2030-01-31T18:00:00+02:00" }
  expect_failures = [var.expires_at]
}

run "expires_at_not_a_date" {
  command = plan
  variables { expires_at = "2030-13-45T18:00:00Z" }
  expect_failures = [var.expires_at]
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
  variables {
    spot                 = { enabled = true, max_price = "cheap" }
    autostop_down        = "terminate"
    spot_without_backups = true
  }
  expect_failures = [var.spot]
}

run "spot_without_checkpoint_s3" {
  command = plan
  variables {
    spot          = { enabled = true }
    autostop_down = "terminate"
  }
  expect_failures = [var.spot]
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
  variables { tags = { "tfcluster:my-key" = "other" } }
  expect_failures = [var.tags]
}
