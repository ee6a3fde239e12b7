# The EFA root's inputs; each passes to ../../modules/gpu_cluster (validated there; null: the module's default).

variable "region" {
  description = "AWS region."
  type        = string
  default     = "us-east-1"
}

variable "profile" {
  description = "AWS CLI profile (null: the default credential chain)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Default tags for every resource (provider default_tags)."
  type        = map(string)
  default     = { project = "tfcluster" }
}

variable "cluster_name" {
  description = "Cluster name (tfcluster:cluster tag)."
  type        = string
  default     = "tfcluster-efa"
}

variable "slots" {
  description = "Task type -> number of hosts."
  type        = map(number)
  default     = { chief = 1, worker = 1 }
}

variable "instance_type" {
  description = "An EFA-capable GPU type (p4d.24xlarge, p5.48xlarge, ...)."
  type        = string
  default     = "p5.48xlarge"
}

variable "ami_id" {
  description = "AMI id (null: the Deep Learning Base OSS AMI, which carries the EFA driver, libfabric and aws-ofi-nccl)."
  type        = string
  default     = null
}

variable "key_name" {
  description = "Existing EC2 key pair (or set public_key)."
  type        = string
  default     = null
}

variable "public_key" {
  description = "OpenSSH public key to create a key pair from (or set key_name)."
  type        = string
  default     = null
}

variable "connect" {
  description = "private (VPN or inside the VPC) or bastion: a host launched on a pre-made interface gets no public IP."
  type        = string
  default     = "private"

  validation {
    condition     = var.connect != "public"
    error_message = "EFA hosts are launched on a pre-made interface and get no public IP. Fix: connect = \"private\" (VPN, control machine in the VPC) or \"bastion\" with bastion = { address, user }."
  }
}

variable "bastion" {
  description = "Jump host for connect = \"bastion\": { address, user, port = 22 }."
  type = object({
    address = string
    user    = string
    port    = optional(number, 22)
  })
  default = null
}

variable "allowed_ssh_cidrs" {
  description = "CIDRs allowed to SSH in (your VPN/VPC range, or the bastion's private address)."
  type        = list(string)
}

variable "subnet_id" {
  description = "Existing subnet (with a NAT gateway or endpoints: the hosts have no public IP). null: a created VPC, whose hosts then cannot reach the internet."
  type        = string
  default     = null
}

variable "availability_zone" {
  description = "Zone of the created subnet (null: the first that offers instance_type)."
  type        = string
  default     = null
}

variable "autostop_down" {
  description = "A host that powers itself off is stopped or terminated."
  type        = string
  default     = null
}

variable "expires_at" {
  description = "RFC 3339 UTC expiry (tfcluster:expires tag)."
  type        = string
  default     = null
}

variable "checkpoint_s3" {
  description = "Checkpoint location the hosts may use: { bucket, prefix }."
  type = object({
    bucket = string
    prefix = string
  })
  default = null
}
