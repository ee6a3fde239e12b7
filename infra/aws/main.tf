# Real AWS. Copy terraform.tfvars.example to terraform.tfvars and edit it; for shared state copy
# backend.tf.example to backend.tf (see README.md). `make provision CLUSTER=aws` runs init + apply here.

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
  ami_id                      = var.ami_id
  ssh_user                    = var.ssh_user
  key_name                    = var.key_name
  public_key                  = var.public_key
  allowed_ssh_cidrs           = var.allowed_ssh_cidrs
  allow_ssh_from_anywhere     = var.allow_ssh_from_anywhere
  tf_port                     = var.tf_port
  spot                        = var.spot
  placement_group             = var.placement_group
  network_interface_ids       = var.network_interface_ids
  root_volume_size            = var.root_volume_size
  subnet_id                   = var.subnet_id
  availability_zone           = var.availability_zone
  flow_log_destination_arn    = var.flow_log_destination_arn
  checkpoint_s3               = var.checkpoint_s3
}
