# Most inputs pass straight to ../modules/gpu_cluster, which validates them; see its README for details.

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

variable "cluster_name" {
  description = "Cluster name (tfcluster:cluster tag)."
  type        = string
  default     = "tfcluster-aws"
}

variable "slots" {
  description = "Task type -> number of hosts."
  type        = map(number)
  default     = { worker = 2 }
}

variable "instance_type" {
  description = "GPU instance type."
  type        = string
  default     = "g5.xlarge"
}

variable "allow_non_gpu_instance_type" {
  description = "Allow a non-GPU instance type."
  type        = bool
  default     = false
}

variable "ami_id" {
  description = "AMI id; null looks up the newest Deep Learning Base AMI (Ubuntu 22.04)."
  type        = string
  default     = null
}

variable "ssh_user" {
  description = "Login user of the AMI."
  type        = string
  default     = "ubuntu"
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

variable "allowed_ssh_cidrs" {
  description = "CIDRs allowed to SSH in (your address/32)."
  type        = list(string)
  default     = []
}

variable "allow_ssh_from_anywhere" {
  description = "Explicitly allow 0.0.0.0/0 in allowed_ssh_cidrs."
  type        = bool
  default     = false
}

variable "tf_port" {
  description = "TensorFlow gRPC port."
  type        = number
  default     = 2222
}

variable "spot" {
  description = "Spot settings: { enabled = true, max_price = \"1.20\" }."
  type = object({
    enabled   = optional(bool, false)
    max_price = optional(string)
  })
  default = {}
}

variable "placement_group" {
  description = "Create a cluster placement group."
  type        = bool
  default     = false
}

variable "network_interface_ids" {
  description = "Slot -> pre-created (EFA) network interface id; see ../modules/efa_network."
  type        = map(string)
  default     = {}
}

variable "root_volume_size" {
  description = "Root volume size in GiB."
  type        = number
  default     = 200
}

variable "subnet_id" {
  description = "Existing subnet (null: create a VPC)."
  type        = string
  default     = null
}

variable "availability_zone" {
  description = "AZ of the created subnet."
  type        = string
  default     = null
}

variable "flow_log_destination_arn" {
  description = "S3 bucket ARN for VPC flow logs (null: none)."
  type        = string
  default     = null
}

variable "checkpoint_s3" {
  description = "Checkpoint location the hosts may use: { bucket = \"...\", prefix = \"...\" }."
  type = object({
    bucket = string
    prefix = string
  })
  default = null
}

variable "tags" {
  description = "Default tags for every resource (provider default_tags)."
  type        = map(string)
  default     = { project = "tfcluster" }
}
