# Issue 11: GPU hosts. The AMI lookup per instance type (x86_64 vs the arm64 Deep Learning AMI for Graviton types),
# NVIDIA-only GPU counts (AMD g4ad counts 0), and NCCL's all-TCP rule between members only when hosts have GPUs.

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

run "g5_xlarge_x86_nvidia_nccl" {
  command = plan

  assert {
    condition     = jsonencode(output.ami_lookup) == jsonencode({ architecture = "x86_64", name = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *", owners = ["amazon"] })
    error_message = "g5.xlarge: the x86_64 Deep Learning Base OSS AMI owned by amazon"
  }
  assert {
    condition     = one([for f in data.aws_ami.deep_learning[0].filter : f.values[0] if f.name == "name"]) == output.ami_lookup.name && one([for f in data.aws_ami.deep_learning[0].filter : f.values[0] if f.name == "architecture"]) == "x86_64"
    error_message = "the data source filters by the chosen name and architecture"
  }
  assert {
    condition     = output.gpus == 1 && output.gpu_vendor == "nvidia"
    error_message = "g5.xlarge: 1 NVIDIA GPU"
  }
  assert {
    condition     = length(aws_security_group_rule.nccl_in) == 1 && aws_security_group_rule.nccl_in[0].self && aws_security_group_rule.nccl_in[0].protocol == "tcp" && aws_security_group_rule.nccl_in[0].from_port == 0 && aws_security_group_rule.nccl_in[0].to_port == 65535 && aws_security_group_rule.nccl_in[0].type == "ingress"
    error_message = "GPU hosts admit all TCP from members of the group (NCCL)"
  }
  assert {
    condition     = length(aws_security_group_rule.nccl_out) == 1 && aws_security_group_rule.nccl_out[0].self && aws_security_group_rule.nccl_out[0].type == "egress" && aws_security_group_rule.nccl_out[0].to_port == 65535
    error_message = "GPU hosts may reach members on all TCP ports (NCCL)"
  }
  assert {
    condition     = aws_security_group_rule.training_in.self && aws_security_group_rule.ssh_in[0].from_port == 22 && aws_security_group_rule.ssh_in[0].to_port == 22
    error_message = "the training port and SSH rules stay as they are"
  }
}

run "g5g_graviton_arm64_ami" {
  command = plan
  variables { instance_type = "g5g.16xlarge" }

  assert {
    condition     = output.ami_lookup.name == "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *" && output.ami_lookup.architecture == "arm64"
    error_message = "g5g: the arm64 Deep Learning AMI, which has its own name"
  }
  assert {
    condition     = output.gpus == 2 && output.gpu_vendor == "nvidia" && length(aws_security_group_rule.nccl_in) == 1
    error_message = "g5g.16xlarge: 2 NVIDIA T4g GPUs, NCCL open"
  }
}

run "p6e_gb200_arm64_ami" {
  command = plan
  variables { instance_type = "p6e-gb200.36xlarge" }

  assert {
    condition     = output.ami_lookup.architecture == "arm64" && startswith(output.ami_lookup.name, "Deep Learning ARM64 ") && output.gpus == 4
    error_message = "p6e-gb200 (Grace): arm64 AMI, 4 GPUs"
  }
}

run "p5_48xlarge_x86_eight_gpus" {
  command = plan
  variables { instance_type = "p5.48xlarge" }

  assert {
    condition     = output.ami_lookup.architecture == "x86_64" && startswith(output.ami_lookup.name, "Deep Learning Base OSS ") && output.gpus == 8 && alltrue([for h in output.hosts : h.gpus == 8])
    error_message = "p5.48xlarge: x86_64 AMI, 8 GPUs"
  }
}

run "g4ad_amd_counts_zero_and_no_nccl" {
  command = plan
  variables { instance_type = "g4ad.4xlarge" }

  assert {
    condition     = output.gpus == 0 && output.gpu_vendor == "amd" && alltrue([for h in output.hosts : h.gpus == 0])
    error_message = "g4ad carries AMD GPUs: 0 NVIDIA GPUs, vendor amd"
  }
  assert {
    condition     = alltrue([for i in aws_instance.this : i.tags[output.tag_keys.gpus] == "0"])
    error_message = "the gpus tag counts NVIDIA GPUs only"
  }
  assert {
    condition     = length(aws_security_group_rule.nccl_in) == 0 && length(aws_security_group_rule.nccl_out) == 0
    error_message = "no NCCL rule without NVIDIA GPUs"
  }
}

run "cpu_type_x86_no_nccl" {
  command = plan
  variables {
    instance_type               = "m5.large"
    allow_non_gpu_instance_type = true
  }

  assert {
    condition     = output.gpus == 0 && output.gpu_vendor == "none" && output.ami_lookup.architecture == "x86_64"
    error_message = "m5.large: no GPU, x86_64"
  }
  assert {
    condition     = length(aws_security_group_rule.nccl_in) == 0 && length(aws_security_group_rule.nccl_out) == 0 && aws_security_group_rule.training_in.from_port == var.tf_port
    error_message = "a CPU-only cluster keeps to the training port: no NCCL rule"
  }
}

run "cpu_graviton_arm64" {
  command = plan
  variables {
    instance_type               = "c7g.large"
    allow_non_gpu_instance_type = true
  }

  assert {
    condition     = output.ami_lookup.architecture == "arm64" && output.gpus == 0
    error_message = "c7g (Graviton, no GPU): arm64 AMI, 0 GPUs"
  }
}

run "ami_name_filter_and_gpus_override" {
  command = plan
  variables {
    ami_name_filter   = "my-golden-image-*"
    ami_owners        = ["123456789012"]
    gpus_per_instance = 0
  }

  assert {
    condition     = jsonencode(output.ami_lookup) == jsonencode({ architecture = "x86_64", name = "my-golden-image-*", owners = ["123456789012"] }) && jsonencode(data.aws_ami.deep_learning[0].owners) == jsonencode(["123456789012"])
    error_message = "ami_name_filter and ami_owners override the lookup"
  }
  assert {
    condition     = output.gpus == 0 && length(aws_security_group_rule.nccl_in) == 0
    error_message = "gpus_per_instance = 0 declares no GPU: no NCCL rule"
  }
}

run "ami_id_skips_the_lookup" {
  command = plan
  variables { ami_id = "ami-0123456789abcdef0" }

  assert {
    condition     = length(data.aws_ami.deep_learning) == 0 && output.ami_lookup == null && aws_instance.this["worker-0"].ami == "ami-0123456789abcdef0"
    error_message = "a pinned ami_id is used as is"
  }
}

run "efa_root_launches_the_hosts_itself" {
  command = plan
  variables {
    instance_type    = "p5.48xlarge"
    launch_instances = false
    efa              = true
  }

  assert {
    condition     = length(aws_instance.this) == 0 && length(aws_spot_instance_request.this) == 0
    error_message = "launch_instances = false: the module launches nothing"
  }
  assert {
    condition     = aws_security_group_rule.nccl_in[0].protocol == "-1" && aws_security_group_rule.nccl_out[0].protocol == "-1" && aws_security_group_rule.nccl_in[0].self
    error_message = "efa = true: members admit all traffic (every protocol) from each other"
  }
  assert {
    condition     = output.launch.instance_type == "p5.48xlarge" && output.launch.shutdown_behavior == "stop" && output.launch.slot_tags["worker-1"][output.tag_keys.task_index] == "1" && output.launch.slot_tags["worker-0"][output.tag_keys.gpus] == "8"
    error_message = "the launch output carries the settings and every slot's tags"
  }
}
