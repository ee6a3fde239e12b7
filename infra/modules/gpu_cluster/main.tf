locals {
  # The contract with the inventory (inventory/tfcluster.py, EC2 source): written here and nowhere else.
  tag_keys = {
    cluster    = "tfcluster:cluster"
    task_type  = "tfcluster:task_type"
    task_index = "tfcluster:task_index"
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
  slot_tags = {
    for name, s in local.slots : name => merge(local.common_tags, {
      Name                        = "${var.cluster_name}-${name}"
      (local.tag_keys.task_type)  = s.task_type
      (local.tag_keys.task_index) = tostring(s.task_index)
    })
  }

  # GPUs per instance of the common GPU types; an unknown GPU type counts 1, override with gpus_per_instance.
  gpu_counts = {
    "p3.2xlarge"    = 1
    "p3.8xlarge"    = 4
    "p3.16xlarge"   = 8
    "p3dn.24xlarge" = 8
    "p4d.24xlarge"  = 8
    "p4de.24xlarge" = 8
    "p5.4xlarge"    = 1
    "p5.48xlarge"   = 8
    "p5e.48xlarge"  = 8
    "p5en.48xlarge" = 8
    "g4dn.12xlarge" = 4
    "g4dn.metal"    = 8
    "g5.12xlarge"   = 4
    "g5.24xlarge"   = 4
    "g5.48xlarge"   = 8
    "g6.12xlarge"   = 4
    "g6.24xlarge"   = 4
    "g6.48xlarge"   = 8
    "g6e.12xlarge"  = 4
    "g6e.24xlarge"  = 4
    "g6e.48xlarge"  = 8
  }
  is_gpu_type = can(regex("^(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6-b200|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|gr6f)\\.", var.instance_type))
  gpus        = coalesce(var.gpus_per_instance, lookup(local.gpu_counts, var.instance_type, local.is_gpu_type ? 1 : 0))

  ami_id     = coalesce(var.ami_id, try(data.aws_ami.deep_learning[0].id, null))
  key_name   = var.public_key != null ? aws_key_pair.this[0].key_name : var.key_name
  subnet_id  = var.subnet_id != null ? var.subnet_id : aws_subnet.this[0].id
  vpc_id     = var.subnet_id != null ? data.aws_subnet.existing[0].vpc_id : aws_vpc.this[0].id
  placement  = var.placement_group ? aws_placement_group.this[0].name : null
  ondemand   = var.spot.enabled ? {} : local.slots
  spot_slots = var.spot.enabled ? local.slots : {}

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
    values = [var.ami_name_filter]
  }
  filter {
    name   = "architecture"
    values = [can(regex("^(g5g|p6e)", var.instance_type)) ? "arm64" : "x86_64"]
  }
  filter {
    name   = "state"
    values = ["available"]
  }
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
  #checkov:skip=CKV_AWS_88:Public IPs are opt-out (associate_public_ip = false); they let Ansible reach hosts from allowed_ssh_cidrs without a bastion.
  for_each = local.ondemand

  ami                         = local.ami_id
  instance_type               = var.instance_type
  key_name                    = local.key_name
  subnet_id                   = contains(keys(var.network_interface_ids), each.key) ? null : local.subnet_id
  vpc_security_group_ids      = contains(keys(var.network_interface_ids), each.key) ? null : [aws_security_group.this.id]
  associate_public_ip_address = contains(keys(var.network_interface_ids), each.key) ? null : var.associate_public_ip
  placement_group             = local.placement
  iam_instance_profile        = local.instance_profile
  monitoring                  = var.monitoring
  ebs_optimized               = true
  user_data                   = var.user_data

  dynamic "network_interface" {
    for_each = contains(keys(var.network_interface_ids), each.key) ? [var.network_interface_ids[each.key]] : []
    content {
      network_interface_id = network_interface.value
      device_index         = 0
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = var.metadata_hop_limit
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size
    encrypted             = true
    kms_key_id            = var.root_volume_kms_key_id
    delete_on_termination = true
  }

  volume_tags = local.slot_tags[each.key]
  tags        = local.slot_tags[each.key]

  lifecycle {
    precondition {
      condition     = alltrue([for k in keys(var.network_interface_ids) : contains(keys(local.slots), k)])
      error_message = "network_interface_ids has keys that are not slots of this cluster. Fix: use slot names such as \"worker-0\" (one per host)."
    }
  }
}

resource "aws_spot_instance_request" "this" {
  #checkov:skip=CKV_AWS_88:Public IPs are opt-out (associate_public_ip = false); they let Ansible reach hosts from allowed_ssh_cidrs without a bastion.
  for_each = local.spot_slots

  spot_type            = "one-time"
  spot_price           = var.spot.max_price
  wait_for_fulfillment = true

  ami                         = local.ami_id
  instance_type               = var.instance_type
  key_name                    = local.key_name
  subnet_id                   = contains(keys(var.network_interface_ids), each.key) ? null : local.subnet_id
  vpc_security_group_ids      = contains(keys(var.network_interface_ids), each.key) ? null : [aws_security_group.this.id]
  associate_public_ip_address = contains(keys(var.network_interface_ids), each.key) ? null : var.associate_public_ip
  placement_group             = local.placement
  iam_instance_profile        = local.instance_profile
  monitoring                  = var.monitoring
  ebs_optimized               = true
  user_data                   = var.user_data

  dynamic "network_interface" {
    for_each = contains(keys(var.network_interface_ids), each.key) ? [var.network_interface_ids[each.key]] : []
    content {
      network_interface_id = network_interface.value
      device_index         = 0
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = var.metadata_hop_limit
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size
    encrypted             = true
    kms_key_id            = var.root_volume_kms_key_id
    delete_on_termination = true
  }

  volume_tags = local.slot_tags[each.key]
  # Tags here land on the spot request only; aws_ec2_tag.spot copies them onto the instance the request launched.
  tags = local.slot_tags[each.key]
}

resource "aws_ec2_tag" "spot" {
  for_each = merge([
    for name in keys(local.spot_slots) : { for k, v in local.slot_tags[name] : "${name}|${k}" => { slot = name, key = k, value = v } }
  ]...)

  resource_id = aws_spot_instance_request.this[each.value.slot].spot_instance_id
  key         = each.value.key
  value       = each.value.value
}
