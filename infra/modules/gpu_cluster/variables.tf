# ---------------------------------------------------------------------------------------------------------------
# Cluster shape
# ---------------------------------------------------------------------------------------------------------------
variable "cluster_name" {
  description = "Name of the cluster: the value of the tfcluster:cluster tag and the prefix of every resource name."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.cluster_name))
    error_message = "cluster_name must be 3-32 characters of lower-case letters, digits and '-', starting with a letter and not ending with '-'. Fix: pick a name like \"tfcluster-dev\"."
  }
}

variable "slots" {
  description = "Task type -> number of hosts of that type (chief, ps, worker, evaluator). One instance per slot, named \"<type>-<index>\"; the slot, never the launch order, gives a host its TF_CONFIG task."
  type        = map(number)
  default     = { worker = 2 }

  validation {
    condition     = alltrue([for t in keys(var.slots) : contains(["chief", "ps", "worker", "evaluator"], t)])
    error_message = "slots has an unknown task type. Fix: use only the keys chief, ps, worker and evaluator, e.g. { chief = 1, worker = 2 }."
  }
  validation {
    condition     = alltrue([for n in values(var.slots) : n >= 1 && floor(n) == n])
    error_message = "slots counts must be whole numbers >= 1. Fix: remove a task type you do not want instead of setting it to 0."
  }
  validation {
    condition     = lookup(var.slots, "chief", 0) <= 1 && lookup(var.slots, "evaluator", 0) <= 1
    error_message = "slots allows at most one chief and one evaluator. Fix: set chief = 1 (or leave it out) and add more workers instead."
  }
  validation {
    condition     = lookup(var.slots, "chief", 0) + lookup(var.slots, "worker", 0) >= 1
    error_message = "slots needs at least one chief or worker to train. Fix: add worker = 1 (or more)."
  }
  validation {
    condition     = lookup(var.slots, "ps", 0) == 0 || (lookup(var.slots, "chief", 0) == 1 && lookup(var.slots, "worker", 0) >= 1)
    error_message = "slots with ps (parameter-server training) also needs exactly one chief and at least one worker. Fix: e.g. { chief = 1, ps = 1, worker = 2 }, or drop ps for multi-worker mirrored training."
  }
}

variable "instance_type" {
  description = "EC2 instance type for every host; must be a GPU family (p3, p3dn, p4d, p4de, p5, p5e, p5en, g4dn, g5, g6, g6e, ...) unless allow_non_gpu_instance_type is true."
  type        = string
  default     = "g5.xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like \"<family>.<size>\", e.g. \"g5.xlarge\"."
  }
  validation {
    condition     = var.allow_non_gpu_instance_type || can(regex("^(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6-b200|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|gr6f)\\.", var.instance_type))
    error_message = "instance_type is not a GPU instance family. Fix: use a GPU type such as g5.xlarge, g6.xlarge, g4dn.xlarge, p4d.24xlarge or p5.48xlarge, or set allow_non_gpu_instance_type = true for a CPU-only cluster."
  }
}

variable "allow_non_gpu_instance_type" {
  description = "Allow an instance type outside the GPU families (a cheap CPU-only cluster for smoke tests)."
  type        = bool
  default     = false
}

variable "gpus_per_instance" {
  description = "GPUs per instance reported in the hosts output. null: looked up from a table of known GPU instance types (1 for an unknown type, 0 for non-GPU types)."
  type        = number
  default     = null

  validation {
    condition     = var.gpus_per_instance == null || try(var.gpus_per_instance >= 0 && floor(var.gpus_per_instance) == var.gpus_per_instance && var.gpus_per_instance <= 16, false)
    error_message = "gpus_per_instance must be a whole number from 0 to 16, or null to look it up from instance_type."
  }
}

# ---------------------------------------------------------------------------------------------------------------
# Image, access
# ---------------------------------------------------------------------------------------------------------------
variable "ami_id" {
  description = "AMI for every host. null: the newest AWS Deep Learning AMI matching ami_name_filter (pin an id in production so a new AMI release does not replace the cluster)."
  type        = string
  default     = null

  validation {
    condition     = var.ami_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must look like \"ami-0123456789abcdef0\". Fix: copy the id from the EC2 console, or leave it null to look up the Deep Learning AMI."
  }
}

variable "ami_name_filter" {
  description = "Name filter of the Deep Learning AMI lookup (used when ami_id is null)."
  type        = string
  default     = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
}

variable "ami_owners" {
  description = "Owners of the Deep Learning AMI lookup."
  type        = list(string)
  default     = ["amazon"]
}

variable "ssh_user" {
  description = "Login user of the AMI (ubuntu for the Ubuntu Deep Learning AMIs, ec2-user for Amazon Linux)."
  type        = string
  default     = "ubuntu"
}

variable "key_name" {
  description = "Existing EC2 key pair name. Set this or public_key (not both); with neither, hosts have no SSH key (SSM only)."
  type        = string
  default     = null
}

variable "public_key" {
  description = "OpenSSH public key; the module creates a key pair from it. Set this or key_name (not both)."
  type        = string
  default     = null

  validation {
    condition     = var.public_key == null || can(regex("^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+", var.public_key))
    error_message = "public_key must be an OpenSSH public key line (\"ssh-ed25519 AAAA... comment\"). Fix: pass the content of ~/.ssh/id_ed25519.pub, not the private key or a path."
  }
  validation {
    condition     = var.public_key == null || var.key_name == null
    error_message = "public_key and key_name are both set. Fix: set only one: key_name to use an existing key pair, or public_key to create one."
  }
}

variable "allowed_ssh_cidrs" {
  description = "IPv4 CIDRs allowed to reach SSH (22). Empty: no SSH ingress at all."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.allowed_ssh_cidrs : can(cidrhost(c, 0)) && can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+/[0-9]+$", c))])
    error_message = "allowed_ssh_cidrs has an entry that is not an IPv4 CIDR. Fix: write addresses with a prefix length, e.g. \"203.0.113.7/32\"."
  }
  validation {
    condition     = var.allow_ssh_from_anywhere || !anytrue([for c in var.allowed_ssh_cidrs : can(cidrhost(c, 0)) && endswith(c, "/0")])
    error_message = "allowed_ssh_cidrs opens SSH to the whole internet (a /0 CIDR). Fix: use your own address, e.g. \"203.0.113.7/32\", or set allow_ssh_from_anywhere = true if you really mean it."
  }
}

variable "allow_ssh_from_anywhere" {
  description = "Explicitly allow a /0 CIDR in allowed_ssh_cidrs."
  type        = bool
  default     = false
}

variable "egress_cidrs" {
  description = "IPv4 CIDRs hosts may reach on 80/443 (package mirrors, S3, the NVIDIA repositories). Traffic between hosts on tf_port is always allowed."
  type        = list(string)
  default     = ["0.0.0.0/0"]

  validation {
    condition     = alltrue([for c in var.egress_cidrs : can(cidrhost(c, 0))])
    error_message = "egress_cidrs has an entry that is not a CIDR. Fix: e.g. \"0.0.0.0/0\" or \"10.0.0.0/8\"."
  }
}

variable "tf_port" {
  description = "TensorFlow gRPC port every task listens on; open only between members of the cluster security group."
  type        = number
  default     = 2222

  validation {
    condition     = var.tf_port >= 1024 && var.tf_port <= 65535 && floor(var.tf_port) == var.tf_port && var.tf_port != 22
    error_message = "tf_port must be a whole number from 1024 to 65535. Fix: use an unprivileged port such as 2222."
  }
}

# ---------------------------------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------------------------------
variable "spot" {
  description = "Run the hosts as one-time spot instances (aws_spot_instance_request, works on every provider version). max_price null: up to the on-demand price."
  type = object({
    enabled   = optional(bool, false)
    max_price = optional(string)
  })
  default = {}

  validation {
    condition     = var.spot.max_price == null || try(tonumber(var.spot.max_price) > 0, false)
    error_message = "spot.max_price must be a positive price in USD per hour as a string, e.g. \"1.20\", or null."
  }
}

variable "placement_group" {
  description = "Create a cluster placement group (low-latency network between hosts). Off for the local emulator, which does not implement placement groups."
  type        = bool
  default     = false
}

variable "network_interface_ids" {
  description = "EFA-ready networking: slot name -> pre-created network interface id (e.g. from ../efa_network, which needs a newer provider) attached as device 0. Empty: the module places each host in subnet_id with its security group."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for id in values(var.network_interface_ids) : can(regex("^eni-[0-9a-f]{8,17}$", id))])
    error_message = "network_interface_ids values must be network interface ids like \"eni-0123456789abcdef0\"."
  }
}

variable "root_volume_size" {
  description = "Root volume size in GiB (encrypted gp3)."
  type        = number
  default     = 200

  validation {
    condition     = var.root_volume_size >= 50 && var.root_volume_size <= 16384
    error_message = "root_volume_size must be between 50 and 16384 GiB. Fix: the Deep Learning AMIs need at least 50 GiB."
  }
}

variable "root_volume_kms_key_id" {
  description = "KMS key ARN for the root volumes. null: the account's default EBS key."
  type        = string
  default     = null
}

variable "metadata_hop_limit" {
  description = "IMDSv2 response hop limit (1: only the host itself; 2: also containers on the host)."
  type        = number
  default     = 1

  validation {
    condition     = var.metadata_hop_limit >= 1 && var.metadata_hop_limit <= 64
    error_message = "metadata_hop_limit must be from 1 to 64."
  }
}

variable "monitoring" {
  description = "Detailed (1-minute) CloudWatch monitoring."
  type        = bool
  default     = true
}

variable "associate_public_ip" {
  description = "Give each host a public IP (needed to SSH from allowed_ssh_cidrs without a bastion or VPN)."
  type        = bool
  default     = true
}

variable "user_data" {
  description = "Cloud-init user data for every host."
  type        = string
  default     = null
}

# ---------------------------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------------------------
variable "subnet_id" {
  description = "Existing subnet for the hosts. null: the module creates a VPC, a subnet, an internet gateway and a route."
  type        = string
  default     = null

  validation {
    condition     = var.subnet_id == null || can(regex("^subnet-[0-9a-f]{8,17}$", var.subnet_id))
    error_message = "subnet_id must look like \"subnet-0123456789abcdef0\", or be null to create a VPC."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the VPC created when subnet_id is null; the hosts' subnet is its first /24 (for a /16)."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && try(tonumber(split("/", var.vpc_cidr)[1]) >= 16 && tonumber(split("/", var.vpc_cidr)[1]) <= 20, false)
    error_message = "vpc_cidr must be an IPv4 CIDR of /16 to /20, e.g. \"10.42.0.0/16\"."
  }
}

variable "availability_zone" {
  description = "Availability zone of the created subnet (null: AWS picks). Pick one that offers instance_type."
  type        = string
  default     = null
}

variable "flow_log_destination_arn" {
  description = "S3 bucket ARN that receives VPC flow logs of the created VPC. null: no flow logs."
  type        = string
  default     = null
}

# ---------------------------------------------------------------------------------------------------------------
# IAM
# ---------------------------------------------------------------------------------------------------------------
variable "checkpoint_s3" {
  description = "S3 location the hosts may read and write checkpoints under (bucket and key prefix, no leading/trailing '/'). null: no S3 access."
  type = object({
    bucket = string
    prefix = string
  })
  default = null

  validation {
    condition     = var.checkpoint_s3 == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.checkpoint_s3.bucket))
    error_message = "checkpoint_s3.bucket must be a bucket name (not an s3:// URI or ARN), e.g. \"my-training-bucket\"."
  }
  validation {
    condition     = var.checkpoint_s3 == null || can(regex("^[^/].*[^/]$", var.checkpoint_s3.prefix))
    error_message = "checkpoint_s3.prefix must be a non-empty key prefix without a leading or trailing '/', e.g. \"tfcluster/checkpoints\"."
  }
}

variable "create_instance_profile" {
  description = "Create an IAM role and instance profile for the hosts (with the checkpoint_s3 policy when set)."
  type        = bool
  default     = true
}

variable "iam_instance_profile" {
  description = "Existing instance profile name to use instead of creating one (create_instance_profile is then ignored)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Extra tags for every resource. The tfcluster:* keys are reserved for the module."
  type        = map(string)
  default     = {}

  validation {
    condition     = !anytrue([for k in keys(var.tags) : startswith(k, "tfcluster:")])
    error_message = "tags uses a reserved tfcluster:* key. Fix: remove it; the module writes tfcluster:cluster, tfcluster:task_type and tfcluster:task_index itself."
  }
}
