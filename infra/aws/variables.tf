# Inputs of the real-AWS root. Each passes to ../modules/gpu_cluster, which validates it and holds its default:
# null here means "the module's default" (see the module README for each). Only the provider settings are this
# root's own.

# --- provider ----------------------------------------------------------------------------------------------------
variable "region" {
  description = "AWS region."
  type        = string
  default     = "us-east-1"
}

variable "profile" {
  description = "AWS CLI profile (null: the default credential chain: AWS_PROFILE, environment keys, SSO, instance role)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Default tags for every resource (provider default_tags). The tfcluster:* keys are the module's."
  type        = map(string)
  default     = { project = "tfcluster" }
}

# --- cluster shape -----------------------------------------------------------------------------------------------
variable "cluster_name" {
  description = "Cluster name (tfcluster:cluster tag; prefix of every resource name)."
  type        = string
  default     = "tfcluster-aws"
}

variable "slots" {
  description = "Task type -> number of hosts, e.g. { chief = 1, worker = 2 }. null: the module's { worker = 2 }."
  type        = map(number)
  default     = null
}

variable "instance_type" {
  description = "GPU instance type. null: the module's g5.xlarge."
  type        = string
  default     = null
}

variable "allow_non_gpu_instance_type" {
  description = "Allow a non-GPU instance type (a CPU-only smoke-test cluster)."
  type        = bool
  default     = null
}

variable "gpus_per_instance" {
  description = "NVIDIA GPUs per host. null: looked up from instance_type."
  type        = number
  default     = null
}

# --- image, login ------------------------------------------------------------------------------------------------
variable "ami_id" {
  description = "AMI id for new hosts. null: the newest AWS Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) for the type's architecture. Decided at the first apply and kept: a change reaches the hosts only with AMI=refresh (-replace=module.cluster.terraform_data.ami), which replaces them all."
  type        = string
  default     = null
}

variable "ami_name_filter" {
  description = "Name filter of the AMI lookup. null: the Deep Learning Base AMI name of the type's architecture (x86_64 or arm64)."
  type        = string
  default     = null
}

variable "ami_owners" {
  description = "Owners of the AMI lookup. null: [\"amazon\"]."
  type        = list(string)
  default     = null
}

variable "ssh_user" {
  description = "Login user of the AMI. null: ubuntu."
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

variable "user_data" {
  description = "Your cloud-init user data for every host (#cloud-config, #! or #include), sent beside the module's boot guard. Runs once, at the first boot."
  type        = string
  default     = null
}

# --- reachability --------------------------------------------------------------------------------------------------
variable "connect" {
  description = "How the control machine reaches the hosts: public, private (VPN or inside the VPC) or bastion. null: public."
  type        = string
  default     = null
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

variable "associate_public_ip" {
  description = "Give each host a public IP. null: yes for connect = public and in a VPC the module creates."
  type        = bool
  default     = null
}

variable "allowed_ssh_cidrs" {
  description = "CIDRs allowed to SSH in: your address/32 (public), your VPN/VPC range (private), the bastion's private address (bastion). Required."
  type        = list(string)
  default     = null
}

variable "allow_ssh_from_anywhere" {
  description = "Explicitly allow 0.0.0.0/0 in allowed_ssh_cidrs."
  type        = bool
  default     = null
}

variable "egress_cidrs" {
  description = "CIDRs the hosts may reach on 80/443. null: anywhere."
  type        = list(string)
  default     = null
}

variable "tf_port" {
  description = "TensorFlow gRPC port. null: the module's (tfcluster's) default training port."
  type        = number
  default     = null
}

# --- instances -----------------------------------------------------------------------------------------------------
variable "spot" {
  description = "Spot settings: { enabled = true, max_price = \"1.20\" } (then autostop_down must be \"terminate\", and checkpoint_s3 set unless spot_without_backups = true)."
  type = object({
    enabled   = optional(bool, false)
    max_price = optional(string)
  })
  default = null
}

variable "spot_without_backups" {
  description = "Allow spot hosts without checkpoint_s3 (a reclaimed host loses its backups). null: no, spot needs checkpoint_s3."
  type        = bool
  default     = null
}

variable "placement_group" {
  description = "Create a cluster placement group (p4d/p5-style multi-node training)."
  type        = bool
  default     = null
}

variable "root_volume_size" {
  description = "Root volume size in GiB. null: 200."
  type        = number
  default     = null
}

variable "root_volume_kms_key_id" {
  description = "KMS key ARN for the root volumes. null: the account's default EBS key."
  type        = string
  default     = null
}

variable "root_volume_throughput" {
  description = "gp3 root volume throughput in MiB/s (125-1000, at most 0.25 per IOPS). null: 125."
  type        = number
  default     = null
}

variable "root_volume_iops" {
  description = "gp3 root volume IOPS (3000-16000). null: 3000."
  type        = number
  default     = null
}

variable "capacity" {
  description = "Capacity: { preference = \"open\" | \"none\", reservation_id = \"cr-...\", capacity_block = true }. null: open (a matching open Capacity Reservation is used automatically). A reservation id, none or a Capacity Block needs a newer provider: launch from infra/examples/efa."
  type = object({
    preference     = optional(string, "open")
    reservation_id = optional(string)
    capacity_block = optional(bool, false)
  })
  default = null
}

variable "metadata_hop_limit" {
  description = "IMDSv2 hop limit. null: 1."
  type        = number
  default     = null
}

variable "monitoring" {
  description = "Detailed CloudWatch monitoring. null: on."
  type        = bool
  default     = null
}

# --- network -------------------------------------------------------------------------------------------------------
variable "subnet_id" {
  description = "Existing subnet (null: create a VPC)."
  type        = string
  default     = null
}

variable "vpc_cidr" {
  description = "CIDR of the created VPC. null: 10.42.0.0/16."
  type        = string
  default     = null
}

variable "availability_zone" {
  description = "Zone of the created subnet. null: the first zone that offers instance_type."
  type        = string
  default     = null
}

variable "flow_log_destination_arn" {
  description = "S3 bucket ARN for VPC flow logs (null: none)."
  type        = string
  default     = null
}

# --- cost guard ----------------------------------------------------------------------------------------------------
variable "autostop_idle_minutes" {
  description = "Boot guard: a host with no tfcluster job unit active for this many minutes since boot powers off (0: never for idleness). null: 30. The CLI sets it from IDLE."
  type        = number
  default     = null
}

variable "autostop_down" {
  description = "A host that powers itself off is stopped (\"stop\", the default) or terminated (\"terminate\"; required with spot)."
  type        = string
  default     = null
}

variable "expires_at" {
  description = "RFC 3339 UTC expiry: the tfcluster:expires tag, and the boot guard powers the hosts off after it (the CLI sets it from TTL, default 24 h). null: no tag, no expiry."
  type        = string
  default     = null
}

# --- IAM -----------------------------------------------------------------------------------------------------------
variable "checkpoint_s3" {
  description = "Checkpoint location the hosts may use: { bucket = \"...\", prefix = \"...\", kms_key_arn = \"arn:aws:kms:...\" (SSE-KMS buckets) }."
  type = object({
    bucket      = string
    prefix      = string
    kms_key_arn = optional(string)
  })
  default = null
}

variable "data_s3" {
  description = "Dataset location the hosts may read: { bucket = \"...\", prefix = \"...\" (\"\": the bucket), kms_key_arn = \"arn:aws:kms:...\" }. null: none."
  type = object({
    bucket      = string
    prefix      = optional(string, "")
    kms_key_arn = optional(string)
  })
  default = null
}

variable "create_instance_profile" {
  description = "Create one IAM role and instance profile per slot (a host may write only its own backups, and only the chief the model dir). null: yes."
  type        = bool
  default     = null
}

variable "iam_instance_profile" {
  description = "Existing instance profile name instead of creating one."
  type        = string
  default     = null
}
