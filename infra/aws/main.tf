# Real AWS. Copy terraform.tfvars.example to terraform.tfvars and edit it; for shared state copy
# backend.tf.example to backend.tf (see README.md). `make provision CLUSTER=aws` runs init + apply here.
# Every input passes straight to ../modules/gpu_cluster, which validates it; a null here means the module's default.

provider "aws" {
  region  = var.region
  profile = var.profile

  default_tags {
    tags = var.tags
  }
}

module "cluster" {
  source = "../modules/gpu_cluster"

  cluster_name                = var.cluster_name
  slots                       = var.slots
  instance_type               = var.instance_type
  allow_non_gpu_instance_type = var.allow_non_gpu_instance_type
  gpus_per_instance           = var.gpus_per_instance

  ami_id          = var.ami_id
  ami_name_filter = var.ami_name_filter
  ami_owners      = var.ami_owners
  ssh_user        = var.ssh_user
  key_name        = var.key_name
  public_key      = var.public_key
  user_data       = var.user_data

  connect                 = var.connect
  bastion                 = var.bastion
  associate_public_ip     = var.associate_public_ip
  allowed_ssh_cidrs       = var.allowed_ssh_cidrs
  allow_ssh_from_anywhere = var.allow_ssh_from_anywhere
  egress_cidrs            = var.egress_cidrs
  tf_port                 = var.tf_port

  spot                   = var.spot
  spot_without_backups   = var.spot_without_backups
  placement_group        = var.placement_group
  root_volume_size       = var.root_volume_size
  root_volume_kms_key_id = var.root_volume_kms_key_id
  root_volume_throughput = var.root_volume_throughput
  root_volume_iops       = var.root_volume_iops
  metadata_hop_limit     = var.metadata_hop_limit
  monitoring             = var.monitoring
  capacity               = var.capacity

  subnet_id                = var.subnet_id
  vpc_cidr                 = var.vpc_cidr
  availability_zone        = var.availability_zone
  flow_log_destination_arn = var.flow_log_destination_arn

  autostop_idle_minutes = var.autostop_idle_minutes
  autostop_down         = var.autostop_down
  expires_at            = var.expires_at

  checkpoint_s3           = var.checkpoint_s3
  data_s3                 = var.data_s3
  create_instance_profile = var.create_instance_profile
  iam_instance_profile    = var.iam_instance_profile
}
