# Hosts launched by hashicorp/aws >= 6.10, for what the module (which validates on 3.39) cannot write:
#   - EFA (Elastic Fabric Adapter) for multi-node NCCL: as many EFA interfaces as the type supports, one per network
#     card, from the table below;
#   - capacity: a targeted On-Demand Capacity Reservation, preference "none", or a Capacity Block for ML.
# gpu_cluster builds everything but the instances (launch_instances = false) and opens all traffic between members
# (efa = true, EFA's requirement); this root launches one instance per slot from the module's launch output through a
# launch template whose network interfaces are created at launch (an EFA can only be attached at launch or to a
# stopped instance).

provider "aws" {
  region  = var.region
  profile = var.profile

  default_tags {
    tags = var.tags
  }
}

module "cluster" {
  source = "../../modules/gpu_cluster"

  cluster_name                = var.cluster_name
  slots                       = var.slots
  instance_type               = var.instance_type
  allow_non_gpu_instance_type = var.allow_non_gpu_instance_type
  ami_id                      = var.ami_id
  key_name                    = var.key_name
  public_key                  = var.public_key
  connect                     = var.connect
  bastion                     = var.bastion
  allowed_ssh_cidrs           = var.allowed_ssh_cidrs
  subnet_id                   = var.subnet_id
  availability_zone           = var.availability_zone
  placement_group             = var.placement_group
  root_volume_throughput      = var.root_volume_throughput
  root_volume_iops            = var.root_volume_iops
  capacity                    = var.capacity
  autostop_idle_minutes       = var.autostop_idle_minutes
  autostop_down               = var.autostop_down
  expires_at                  = var.expires_at
  checkpoint_s3               = var.checkpoint_s3
  data_s3                     = var.data_s3

  launch_instances = false
  efa              = true
}

locals {
  launch = module.cluster.launch

  # EFA interfaces per instance type: the type's maximum, one per network card (AWS: "Maximize network bandwidth on
  # Amazon EC2 instances with multiple network cards", docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html;
  # P5/P5e: up to 32 network cards). The counts are DescribeInstanceTypes' NetworkInfo.EfaInfo.MaximumEfaInterfaces
  # (API_EfaInfo), read from the instance type data moto 5.2.5 ships; the plan checks them against the live API
  # (data.aws_ec2_instance_type.efa_maximum_interfaces). first_card: the first card that takes an EFA (p6-b300's
  # card 0 is ENA only). A type missing here gets none (efa_interfaces overrides).
  efa_table = {
    "p3dn.24xlarge"    = { count = 1, first_card = 0 }
    "p4d.24xlarge"     = { count = 4, first_card = 0 }
    "p4de.24xlarge"    = { count = 4, first_card = 0 }
    "p5.4xlarge"       = { count = 1, first_card = 0 }
    "p5.48xlarge"      = { count = 32, first_card = 0 }
    "p5e.48xlarge"     = { count = 32, first_card = 0 }
    "p5en.48xlarge"    = { count = 16, first_card = 0 }
    "p6-b200.48xlarge" = { count = 8, first_card = 0 }
    "p6-b300.48xlarge" = { count = 16, first_card = 1 }
    "g4dn.8xlarge"     = { count = 1, first_card = 0 }
    "g4dn.12xlarge"    = { count = 1, first_card = 0 }
    "g4dn.16xlarge"    = { count = 1, first_card = 0 }
    "g4dn.metal"       = { count = 1, first_card = 0 }
    "g5.8xlarge"       = { count = 1, first_card = 0 }
    "g5.12xlarge"      = { count = 1, first_card = 0 }
    "g5.16xlarge"      = { count = 1, first_card = 0 }
    "g5.24xlarge"      = { count = 1, first_card = 0 }
    "g5.48xlarge"      = { count = 1, first_card = 0 }
    "g6.8xlarge"       = { count = 1, first_card = 0 }
    "g6.12xlarge"      = { count = 1, first_card = 0 }
    "g6.16xlarge"      = { count = 1, first_card = 0 }
    "g6.24xlarge"      = { count = 1, first_card = 0 }
    "g6.48xlarge"      = { count = 1, first_card = 0 }
    "g6e.8xlarge"      = { count = 1, first_card = 0 }
    "g6e.12xlarge"     = { count = 1, first_card = 0 }
    "g6e.16xlarge"     = { count = 1, first_card = 0 }
    "g6e.24xlarge"     = { count = 2, first_card = 0 }
    "g6e.48xlarge"     = { count = 4, first_card = 0 }
    "gr6.8xlarge"      = { count = 1, first_card = 0 }
    "trn1.32xlarge"    = { count = 8, first_card = 0 }
    "trn1n.32xlarge"   = { count = 16, first_card = 0 }
    "trn2.48xlarge"    = { count = 16, first_card = 0 }
    "hpc6a.48xlarge"   = { count = 1, first_card = 0 }
    "hpc6id.32xlarge"  = { count = 2, first_card = 0 }
    "hpc7a.12xlarge"   = { count = 2, first_card = 0 }
    "hpc7a.24xlarge"   = { count = 2, first_card = 0 }
    "hpc7a.48xlarge"   = { count = 2, first_card = 0 }
    "hpc7a.96xlarge"   = { count = 2, first_card = 0 }
    "hpc7g.4xlarge"    = { count = 1, first_card = 0 }
    "hpc7g.8xlarge"    = { count = 1, first_card = 0 }
    "hpc7g.16xlarge"   = { count = 1, first_card = 0 }
  }
  efa_row   = lookup(local.efa_table, var.instance_type, { count = 0, first_card = 0 })
  efa_count = coalesce(var.efa_interfaces, local.efa_row.count)
  # The network interfaces, in network card order. Card 0, device 0 is the primary interface: an EFA (EFA with ENA,
  # it carries the host's IP) when card 0 takes one, else a plain ENA interface. Every further EFA: the next card,
  # device index 1, efa_additional_type.
  efa_cards = [for i in range(local.efa_count) : local.efa_row.first_card + i]
  interfaces = concat(
    contains(local.efa_cards, 0) ? [] : [{ card = 0, device = 0, type = "interface" }],
    [for card in local.efa_cards : { card = card, device = card == 0 ? 0 : 1, type = card == 0 ? "efa" : var.efa_additional_type }],
  )

  capacity = local.launch.capacity
}

data "aws_ec2_instance_type" "this" {
  instance_type = var.instance_type
}

resource "aws_launch_template" "hosts" {
  name_prefix = "${var.cluster_name}-"
  description = "tfcluster ${var.cluster_name}: ${local.efa_count} EFA interface(s) per host"

  # Also on each instance; here so that the template alone is as strict (IMDSv2, hop limit).
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = local.launch.metadata_hop_limit
  }

  dynamic "network_interfaces" {
    for_each = local.interfaces
    content {
      network_card_index    = network_interfaces.value.card
      device_index          = network_interfaces.value.device
      interface_type        = network_interfaces.value.type == "interface" ? null : network_interfaces.value.type
      subnet_id             = local.launch.subnet_id
      security_groups       = local.launch.security_group_ids
      delete_on_termination = true
    }
  }

  tags = { Name = "${var.cluster_name}-hosts" }

  lifecycle {
    precondition {
      condition     = local.efa_count <= coalesce(data.aws_ec2_instance_type.this.efa_maximum_interfaces, 0) && (local.efa_count == 0 || data.aws_ec2_instance_type.this.efa_supported)
      error_message = "${var.instance_type} takes at most ${coalesce(data.aws_ec2_instance_type.this.efa_maximum_interfaces, 0)} EFA interface(s) (DescribeInstanceTypes), not ${local.efa_count}. Fix: set efa_interfaces to at most that number (0 for none), or choose an EFA-capable type such as p5.48xlarge."
    }
    precondition {
      condition     = local.efa_row.first_card + local.efa_count <= coalesce(data.aws_ec2_instance_type.this.maximum_network_cards, 1)
      error_message = "${var.instance_type} has ${coalesce(data.aws_ec2_instance_type.this.maximum_network_cards, 1)} network card(s): ${local.efa_count} EFA interface(s), one per card, do not fit. Fix: lower efa_interfaces."
    }
  }
}

# AMI=refresh: the module's terraform_data.ami is replaced (-replace=module.cluster.terraform_data.ami), the launch
# output's ami_id becomes unknown, this one changes, and every host is replaced (a root cannot name a module's
# resource in replace_triggered_by).
resource "terraform_data" "ami" {
  input = local.launch.ami_id
}

resource "aws_instance" "this" {
  for_each = local.launch.slot_tags

  ami                                  = local.launch.ami_id
  instance_type                        = local.launch.instance_type
  key_name                             = local.launch.key_name
  placement_group                      = local.launch.placement_group
  iam_instance_profile                 = local.launch.iam_instance_profiles[each.key]
  user_data                            = local.launch.user_data
  instance_initiated_shutdown_behavior = local.launch.shutdown_behavior
  monitoring                           = local.launch.monitoring
  ebs_optimized                        = true

  launch_template {
    id      = aws_launch_template.hosts.id
    version = aws_launch_template.hosts.latest_version
  }

  dynamic "capacity_reservation_specification" {
    for_each = local.capacity.reservation_id != null || local.capacity.preference == "none" ? [local.capacity] : []
    content {
      capacity_reservation_preference = capacity_reservation_specification.value.reservation_id == null ? capacity_reservation_specification.value.preference : null
      dynamic "capacity_reservation_target" {
        for_each = capacity_reservation_specification.value.reservation_id == null ? [] : [capacity_reservation_specification.value.reservation_id]
        content {
          capacity_reservation_id = capacity_reservation_target.value
        }
      }
    }
  }

  # A Capacity Block for ML: market type capacity-block and the block's reservation id (above), as EC2 asks for.
  dynamic "instance_market_options" {
    for_each = local.capacity.capacity_block ? ["capacity-block"] : []
    content {
      market_type = instance_market_options.value
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = local.launch.metadata_hop_limit
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = local.launch.root_volume.size
    throughput            = local.launch.root_volume.throughput
    iops                  = local.launch.root_volume.iops
    encrypted             = true
    kms_key_id            = local.launch.root_volume.kms_key_id
    delete_on_termination = true
  }

  volume_tags = local.launch.slot_tags[each.key]
  tags        = local.launch.slot_tags[each.key]

  lifecycle {
    # Hosts stay put, as in the module: AMI, user data and interfaces are what they were launched with.
    ignore_changes       = [ami, user_data, launch_template]
    replace_triggered_by = [terraform_data.ami]
  }
}
