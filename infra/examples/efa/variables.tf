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
  description = "An EFA-capable GPU type (p4d.24xlarge, p5.48xlarge, ...; any type works, with no EFA when the table in main.tf has none for it)."
  type        = string
  default     = "p5.48xlarge"
}

variable "allow_non_gpu_instance_type" {
  description = "Allow a type outside the GPU families (trn1/trn2, hpc6a/hpc7a, ...)."
  type        = bool
  default     = null
}

variable "efa_interfaces" {
  description = "EFA interfaces per host, one per network card. null: the type's maximum from the table in main.tf (p5.48xlarge 32, p4d.24xlarge 4, ...); 0: none (a plain primary interface)."
  type        = number
  default     = null

  validation {
    condition     = var.efa_interfaces == null || try(var.efa_interfaces >= 0 && var.efa_interfaces <= 32 && floor(var.efa_interfaces) == var.efa_interfaces, false)
    error_message = "efa_interfaces must be a whole number from 0 to 32. Fix: leave it null for the type's maximum, or 1 for one EFA on network card 0."
  }
}

variable "efa_additional_type" {
  description = "Interface type of the EFAs on network cards 1 and up: \"efa\" (EFA with ENA: each also takes an IP address of the subnet) or \"efa-only\" (no IP; AWS's current recommendation, where the provider accepts it)."
  type        = string
  default     = "efa"

  validation {
    condition     = contains(["efa", "efa-only"], var.efa_additional_type)
    error_message = "efa_additional_type must be \"efa\" or \"efa-only\". Fix: \"efa\" (EFA with ENA) works with every provider version; \"efa-only\" saves the subnet's addresses."
  }
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
  description = "Zone of the created subnet (null: the first that offers instance_type). With a Capacity Reservation or Block: its zone."
  type        = string
  default     = null
}

variable "placement_group" {
  description = "A cluster placement group (EFA traffic wants it). Capacity Blocks place their hosts themselves."
  type        = bool
  default     = true
}

variable "capacity" {
  description = "Capacity: { reservation_id = \"cr-...\" } (an On-Demand Capacity Reservation), { reservation_id, capacity_block = true } (a Capacity Block for ML), { preference = \"none\" } or null (open)."
  type = object({
    preference     = optional(string, "open")
    reservation_id = optional(string)
    capacity_block = optional(bool, false)
  })
  default = null
}

variable "root_volume_throughput" {
  description = "gp3 root volume throughput in MiB/s (125-1000). null: 125."
  type        = number
  default     = null
}

variable "root_volume_iops" {
  description = "gp3 root volume IOPS (3000-16000). null: 3000."
  type        = number
  default     = null
}

variable "autostop_idle_minutes" {
  description = "Boot guard: idle minutes before a host powers off (0: never for idleness). null: 30."
  type        = number
  default     = null
}

variable "autostop_down" {
  description = "A host that powers itself off is stopped or terminated."
  type        = string
  default     = null
}

variable "expires_at" {
  description = "RFC 3339 UTC expiry (tfcluster:expires tag; the boot guard powers the hosts off after it)."
  type        = string
  default     = null
}

variable "checkpoint_s3" {
  description = "Checkpoint location the hosts may use: { bucket, prefix, kms_key_arn }."
  type = object({
    bucket      = string
    prefix      = string
    kms_key_arn = optional(string)
  })
  default = null
}

variable "data_s3" {
  description = "Dataset location the hosts may read: { bucket, prefix, kms_key_arn }."
  type = object({
    bucket      = string
    prefix      = optional(string, "")
    kms_key_arn = optional(string)
  })
  default = null
}
