# The same module as infra/aws, applied against the emulated AWS endpoint on loopback (moto_server, started by
# tfcluster/provision/localaws.py). These instances exist only in the emulator: nothing is created in a real AWS account.
# Credentials come from the environment (tfcluster/provision/local.py sets dummy AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY).

provider "aws" {
  region                      = local.region
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true

  endpoints {
    ec2 = var.endpoint
    iam = var.endpoint
    s3  = var.endpoint
    sts = var.endpoint
  }
}

locals {
  region = "us-east-1"
  # The emulated hosts are never logged into (the slots run on this machine): a key pair is still required by the
  # module, so this public key, whose private half was discarded when it was made, stands in for one.
  emulated_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP8OCQSKS455AbuF7Pe+0ktr59CsvfDIJr46GHP8plrb tfcluster-local-emulated"
}

module "cluster" {
  #checkov:skip=CKV_AWS_126:Emulated instances only; moto does not implement MonitorInstances (apply would retry until it times out).
  source = "../modules/gpu_cluster"

  cluster_name      = var.cluster_name
  slots             = var.slots
  instance_type     = var.instance_type
  ami_id            = "ami-1e749f67" # an Ubuntu image moto ships; no Deep Learning AMI lookup in the emulator
  tf_port           = var.base_port
  placement_group   = false # moto does not implement placement groups: apply would hang
  monitoring        = false # moto does not implement MonitorInstances: apply would retry until it times out
  public_key        = local.emulated_public_key
  allowed_ssh_cidrs = ["127.0.0.0/8"]
  autostop_down     = var.autostop_down
  expires_at        = var.expires_at
  tags              = { emulated = "true" }
}
