# The same module as infra/aws, applied against the emulated AWS endpoint on loopback (moto_server, started by
# tools/localaws.py). These instances exist only in the emulator: nothing is created in a real AWS account.
# Credentials come from the environment (tools/provision.py sets dummy AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY).

provider "aws" {
  region                      = "us-east-1"
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
  allowed_ssh_cidrs = ["127.0.0.0/8"]
  tags              = { emulated = "true" }
}
