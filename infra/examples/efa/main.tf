# EFA (Elastic Fabric Adapter) for multi-node NCCL on p4d/p5-class hosts. gpu_cluster builds everything but the
# instances (launch_instances = false) and opens all traffic between members (efa = true, EFA's requirement); this
# root creates one EFA interface per slot and launches each host on it, with the module's settings and tags.
# An EFA can be attached only at launch (or to a stopped instance), and the argument that does it exists only in
# hashicorp/aws >= 6.10: that is why this lives here and not in the module the tests validate on 3.39.

provider "aws" {
  region  = var.region
  profile = var.profile

  default_tags {
    tags = var.tags
  }
}

module "cluster" {
  source = "../../modules/gpu_cluster"

  cluster_name      = var.cluster_name
  slots             = var.slots
  instance_type     = var.instance_type
  ami_id            = var.ami_id
  key_name          = var.key_name
  public_key        = var.public_key
  connect           = var.connect
  bastion           = var.bastion
  allowed_ssh_cidrs = var.allowed_ssh_cidrs
  subnet_id         = var.subnet_id
  availability_zone = var.availability_zone
  placement_group   = true
  autostop_down     = var.autostop_down
  expires_at        = var.expires_at
  checkpoint_s3     = var.checkpoint_s3

  launch_instances = false
  efa              = true
}

locals {
  launch = module.cluster.launch
}

resource "aws_network_interface" "efa" {
  for_each        = local.launch.slot_tags
  description     = "${each.value.Name} EFA"
  subnet_id       = local.launch.subnet_id
  security_groups = local.launch.security_group_ids
  interface_type  = "efa"
  tags            = each.value
}

resource "aws_instance" "this" {
  for_each = aws_network_interface.efa

  ami                                  = local.launch.ami_id
  instance_type                        = local.launch.instance_type
  key_name                             = local.launch.key_name
  placement_group                      = local.launch.placement_group
  iam_instance_profile                 = local.launch.iam_instance_profiles[each.key]
  user_data                            = local.launch.user_data
  instance_initiated_shutdown_behavior = local.launch.shutdown_behavior
  monitoring                           = local.launch.monitoring
  ebs_optimized                        = true

  primary_network_interface {
    network_interface_id = each.value.id
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = local.launch.metadata_hop_limit
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = local.launch.root_volume.size
    encrypted             = true
    kms_key_id            = local.launch.root_volume.kms_key_id
    delete_on_termination = true
  }

  volume_tags = local.launch.slot_tags[each.key]
  tags        = local.launch.slot_tags[each.key]
}
