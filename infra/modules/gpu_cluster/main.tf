locals {
  # The contract with the inventory (aws source) and the cost guard: the EC2 tag keys, written in HCL only here.
  # tfcluster/core/contract.py TAG_KEYS is the definition; tests/unit/test_contract.py proves this copy equal to it.
  tag_keys = {
    cluster    = "tfcluster:cluster"
    task_type  = "tfcluster:task_type"
    task_index = "tfcluster:task_index"
    port       = "tfcluster:port"
    gpus       = "tfcluster:gpus"
    ssh_user   = "tfcluster:ssh_user"
    expires    = "tfcluster:expires"
  }

  # Slot order of the hosts output: chief, ps, worker, evaluator, then index. Never launch order.
  task_order = ["chief", "ps", "worker", "evaluator"]
  slot_list = flatten([
    for t in local.task_order : [
      for i in range(lookup(var.slots, t, 0)) : { name = "${t}-${i}", task_type = t, task_index = i }
    ]
  ])
  slots = { for s in local.slot_list : s.name => s }

  common_tags = merge(var.tags, { (local.tag_keys.cluster) = var.cluster_name })
  # What every host says about itself (the aws inventory source reads these); expires only when expires_at is set.
  host_tags = merge(local.common_tags, {
    (local.tag_keys.port)     = tostring(var.tf_port)
    (local.tag_keys.gpus)     = tostring(local.gpus)
    (local.tag_keys.ssh_user) = var.ssh_user
    }, var.expires_at == null ? {} : {
    (local.tag_keys.expires) = var.expires_at
  })
  slot_tags = {
    for name, s in local.slots : name => merge(local.host_tags, {
      Name                        = "${var.cluster_name}-${name}"
      (local.tag_keys.task_type)  = s.task_type
      (local.tag_keys.task_index) = tostring(s.task_index)
    })
  }

  # GPUs: the module counts NVIDIA GPUs only (what CUDA, NCCL and the driver role can use). g4ad carries AMD
  # Radeon GPUs: 0 here, gpu_vendor "amd". Types missing from the table count 1; override with gpus_per_instance.
  nvidia_gpu_counts = {
    "p2.8xlarge"         = 8
    "p2.16xlarge"        = 16
    "p3.8xlarge"         = 4
    "p3.16xlarge"        = 8
    "p3dn.24xlarge"      = 8
    "p4d.24xlarge"       = 8
    "p4de.24xlarge"      = 8
    "p5.48xlarge"        = 8
    "p5e.48xlarge"       = 8
    "p5en.48xlarge"      = 8
    "p6-b200.48xlarge"   = 8
    "p6-b300.48xlarge"   = 8
    "p6e-gb200.36xlarge" = 4
    "g4dn.12xlarge"      = 4
    "g4dn.metal"         = 8
    "g5.12xlarge"        = 4
    "g5.24xlarge"        = 4
    "g5.48xlarge"        = 8
    "g5g.16xlarge"       = 2
    "g5g.metal"          = 2
    "g6.12xlarge"        = 4
    "g6.24xlarge"        = 4
    "g6.48xlarge"        = 8
    "g6e.12xlarge"       = 4
    "g6e.24xlarge"       = 4
    "g6e.48xlarge"       = 8
  }
  gpu_family_pattern = "^(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6-b200|p6-b300|p6e-gb200|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|gr6f)\\."
  gpu_vendor         = !can(regex(local.gpu_family_pattern, var.instance_type)) ? "none" : startswith(var.instance_type, "g4ad.") ? "amd" : "nvidia"
  gpus               = coalesce(var.gpus_per_instance, local.gpu_vendor == "nvidia" ? lookup(local.nvidia_gpu_counts, var.instance_type, 1) : 0)

  # AMI lookup: Graviton types (a "g" after the generation digit: g5g, c7g, m6gd, p6e-gb200) are arm64 and use the
  # arm64 Deep Learning AMI, which has its own name; everything else the x86_64 one.
  architecture = can(regex("^(a1|[a-z]+[0-9]+[a-z-]*g[a-z0-9]*)\\.", var.instance_type)) ? "arm64" : "x86_64"
  ami_names = {
    x86_64 = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
    arm64  = "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
  }
  ami_name_filter = coalesce(var.ami_name_filter, local.ami_names[local.architecture])
  # The AMI decided now (ami_id, or the newest lookup) and the one kept since the first apply, which new hosts get.
  ami_wanted = coalesce(var.ami_id, try(data.aws_ami.deep_learning[0].id, null))
  ami_id     = terraform_data.ami.input # the kept value (ignore_changes): known at plan, unlike output

  key_name  = var.public_key != null ? aws_key_pair.this[0].key_name : var.key_name
  subnet_id = var.subnet_id != null ? var.subnet_id : aws_subnet.this[0].id
  vpc_id    = var.subnet_id != null ? data.aws_subnet.existing[0].vpc_id : aws_vpc.this[0].id
  placement = var.placement_group ? aws_placement_group.this[0].name : null
  # A created VPC routes to the internet through its gateway only: hosts there need a public IP for packages, even
  # when they are reached by their private IP. An existing subnet brings its own NAT or endpoints.
  public_ip  = coalesce(var.associate_public_ip, var.connect == "public" || var.subnet_id == null)
  ondemand   = var.launch_instances && !var.spot.enabled ? local.slots : {}
  spot_slots = var.launch_instances && var.spot.enabled ? local.slots : {}

  # One normalised view of the hosts, whichever resource launched them.
  instances = merge(
    { for k, i in aws_instance.this : k => { id = i.id, private_ip = i.private_ip, public_ip = i.public_ip } },
    { for k, r in aws_spot_instance_request.this : k => { id = r.spot_instance_id, private_ip = r.private_ip, public_ip = r.public_ip } },
  )
}

data "aws_ami" "deep_learning" {
  count       = var.ami_id == null ? 1 : 0
  most_recent = true
  owners      = var.ami_owners

  filter {
    name   = "name"
    values = [local.ami_name_filter]
  }
  filter {
    name   = "architecture"
    values = [local.architecture]
  }
  filter {
    name   = "state"
    values = ["available"]
  }
}

# The AMI is decided once and kept: ignore_changes keeps the first value, so neither a newer Deep Learning AMI nor a
# changed ami_id replaces a running cluster (nor gives a slot added later another image than its peers). AMI=refresh
# is `terraform apply -replace=module.cluster.terraform_data.ami`: it decides again (ami_id, or the newest image)
# and every host is replaced (replace_triggered_by below), with whatever was on its disks.
resource "terraform_data" "ami" {
  input = local.ami_wanted

  lifecycle {
    ignore_changes = [input]
  }
}

check "ami_pinned" {
  assert {
    condition     = var.ami_id == null || var.ami_id == terraform_data.ami.input
    error_message = "ami_id ${coalesce(var.ami_id, local.ami_id)} is not the AMI this cluster keeps (${terraform_data.ami.input}): the hosts stay on the kept one. Fix: run with AMI=refresh (terraform apply -replace=module.cluster.terraform_data.ami) to replace every host with ami_id, or set ami_id to the kept AMI."
  }
}

# What the instance type brings: local NVMe instance store (the Deep Learning AMI mounts it at /opt/dlami/nvme).
data "aws_ec2_instance_type" "this" {
  instance_type = var.instance_type
}

resource "aws_key_pair" "this" {
  count           = var.public_key != null ? 1 : 0
  key_name_prefix = "${var.cluster_name}-"
  public_key      = var.public_key
  tags            = local.common_tags
}

resource "aws_placement_group" "this" {
  count    = var.placement_group ? 1 : 0
  name     = "${var.cluster_name}-cluster"
  strategy = "cluster"
  tags     = local.common_tags
}

resource "aws_instance" "this" {
  #checkov:skip=CKV_AWS_88:Public IPs follow connect (public) or a created VPC without NAT (egress for packages); SSH stays limited to allowed_ssh_cidrs.
  for_each = local.ondemand

  ami                                  = local.ami_id
  instance_type                        = var.instance_type
  key_name                             = local.key_name
  subnet_id                            = local.subnet_id
  vpc_security_group_ids               = [aws_security_group.this.id]
  associate_public_ip_address          = local.public_ip
  placement_group                      = local.placement
  iam_instance_profile                 = local.instance_profiles[each.key]
  monitoring                           = var.monitoring
  ebs_optimized                        = true
  user_data                            = local.user_data
  instance_initiated_shutdown_behavior = var.autostop_down

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = var.metadata_hop_limit
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size
    throughput            = var.root_volume_throughput
    iops                  = var.root_volume_iops
    encrypted             = true
    kms_key_id            = var.root_volume_kms_key_id
    delete_on_termination = true
  }

  volume_tags = local.slot_tags[each.key]
  tags        = local.slot_tags[each.key]

  lifecycle {
    # Hosts stay put: the AMI and the user data (boot guard, expiry) are what they were launched with; AMI=refresh
    # (-replace=module.cluster.terraform_data.ami) replaces them all.
    ignore_changes       = [ami, user_data]
    replace_triggered_by = [terraform_data.ami]
  }
}

resource "aws_spot_instance_request" "this" {
  #checkov:skip=CKV_AWS_88:Public IPs follow connect (public) or a created VPC without NAT (egress for packages); SSH stays limited to allowed_ssh_cidrs.
  for_each = local.spot_slots

  spot_type            = "one-time"
  spot_price           = var.spot.max_price
  wait_for_fulfillment = true

  ami                                  = local.ami_id
  instance_type                        = var.instance_type
  key_name                             = local.key_name
  subnet_id                            = local.subnet_id
  vpc_security_group_ids               = [aws_security_group.this.id]
  associate_public_ip_address          = local.public_ip
  placement_group                      = local.placement
  iam_instance_profile                 = local.instance_profiles[each.key]
  monitoring                           = var.monitoring
  ebs_optimized                        = true
  user_data                            = local.user_data
  instance_initiated_shutdown_behavior = var.autostop_down # "terminate": var.autostop_down refuses "stop" with spot

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = var.metadata_hop_limit
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size
    throughput            = var.root_volume_throughput
    iops                  = var.root_volume_iops
    encrypted             = true
    kms_key_id            = var.root_volume_kms_key_id
    delete_on_termination = true
  }

  volume_tags = local.slot_tags[each.key]
  # Tags here land on the spot request only; aws_ec2_tag.spot copies them onto the instance the request launched.
  tags = local.slot_tags[each.key]

  lifecycle {
    ignore_changes       = [ami, user_data]
    replace_triggered_by = [terraform_data.ami]
  }
}

resource "aws_ec2_tag" "spot" {
  for_each = merge([
    for name in keys(local.spot_slots) : { for k, v in local.slot_tags[name] : "${name}|${k}" => { slot = name, key = k, value = v } }
  ]...)

  resource_id = aws_spot_instance_request.this[each.value.slot].spot_instance_id
  key         = each.value.key
  value       = each.value.value
}
