# Inputs. `nullable = false` on a variable whose null means nothing: a root that passes null (infra/aws leaves every
# choice it does not make to the module) gets the default written here, the only place it is written.

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
  nullable    = false

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
  description = "EC2 instance type for every host; must be a GPU family (p3, p3dn, p4d, p4de, p5, p5e, p5en, p6-b200, g4dn, g5, g5g, g6, g6e, ...) unless allow_non_gpu_instance_type is true. Graviton types (g5g) get the arm64 Deep Learning AMI."
  type        = string
  default     = "g5.xlarge"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like \"<family>.<size>\". Fix: write e.g. \"g5.xlarge\"."
  }
  validation {
    condition     = var.allow_non_gpu_instance_type || can(regex("^(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6-b200|p6-b300|p6e-gb200|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|gr6f)\\.", var.instance_type))
    error_message = "instance_type is not a GPU instance family. Fix: use a GPU type such as g5.xlarge, g6.xlarge, g4dn.xlarge, p4d.24xlarge or p5.48xlarge, or set allow_non_gpu_instance_type = true for a CPU-only cluster."
  }
}

variable "allow_non_gpu_instance_type" {
  description = "Allow an instance type outside the GPU families (a cheap CPU-only cluster for smoke tests)."
  type        = bool
  default     = false
  nullable    = false
}

variable "gpus_per_instance" {
  description = "NVIDIA GPUs per instance (hosts output, tfcluster:gpus tag; > 0 opens NCCL's ports between members). null: looked up from a table of GPU instance types (1 for an NVIDIA type missing from it; 0 for non-GPU types and for AMD g4ad)."
  type        = number
  default     = null

  validation {
    condition     = var.gpus_per_instance == null || try(var.gpus_per_instance >= 0 && floor(var.gpus_per_instance) == var.gpus_per_instance && var.gpus_per_instance <= 16, false)
    error_message = "gpus_per_instance must be a whole number from 0 to 16. Fix: give the instance type's NVIDIA GPU count, or null to look it up from instance_type."
  }
}

# ---------------------------------------------------------------------------------------------------------------
# Image, access
# ---------------------------------------------------------------------------------------------------------------
variable "ami_id" {
  description = "AMI for new hosts. null: the newest AWS Deep Learning AMI matching ami_name_filter. Either way it is decided once, at the first apply, and kept (terraform_data.ami): a changed ami_id or a newer image reaches the hosts only with AMI=refresh (terraform apply -replace=module.cluster.terraform_data.ami), which replaces every host."
  type        = string
  default     = null

  validation {
    condition     = var.ami_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must look like \"ami-0123456789abcdef0\". Fix: copy the id from the EC2 console, or leave it null to look up the Deep Learning AMI."
  }
}

variable "ami_name_filter" {
  description = "Name filter of the AMI lookup (used when ami_id is null). null: the AWS Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) of the instance type's architecture (\"Deep Learning ARM64 Base OSS ...\" for Graviton types such as g5g)."
  type        = string
  default     = null
}

variable "ami_owners" {
  description = "Owners of the AMI lookup (account ids or aliases such as amazon). Current providers refuse a most_recent lookup without owners."
  type        = list(string)
  default     = ["amazon"]
  nullable    = false

  validation {
    condition     = length(var.ami_owners) > 0
    error_message = "ami_owners is empty: the AMI lookup would take the newest matching image of anyone. Fix: keep [\"amazon\"] for the Deep Learning AMIs, or give the owning account id of your image."
  }
}

variable "ssh_user" {
  description = "Login user of the AMI (ubuntu for the Ubuntu Deep Learning AMIs, ec2-user for Amazon Linux); the tfcluster:ssh_user tag."
  type        = string
  default     = "ubuntu"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user))
    error_message = "ssh_user must be a POSIX user name (lower-case letters, digits, '_' or '-', at most 32). Fix: e.g. \"ubuntu\" for the Ubuntu Deep Learning AMIs."
  }
}

variable "key_name" {
  description = "Existing EC2 key pair name. Set this or public_key (not both); with neither, user_data must install a key (otherwise nobody can log in, and the plan is refused)."
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
    condition     = var.key_name != null || var.public_key != null || var.user_data != null
    error_message = "No SSH key: key_name and public_key are both null, so nobody could log in to the hosts. Fix: set public_key = file(\"~/.ssh/id_ed25519.pub\") (the module creates a key pair) or key_name = \"<an existing EC2 key pair>\" (or user_data that installs a key)."
  }
  validation {
    condition     = var.public_key == null || var.key_name == null
    error_message = "public_key and key_name are both set. Fix: set only one: key_name to use an existing key pair, or public_key to create one."
  }
}

variable "allowed_ssh_cidrs" {
  description = "IPv4 CIDRs allowed to reach SSH (22): your address (connect = public), your VPN or VPC range (private), the bastion's address as the hosts see it (bastion). Required: without it nobody could reach the hosts."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = length(var.allowed_ssh_cidrs) > 0
    error_message = "allowed_ssh_cidrs is empty: no SSH ingress, so nobody could reach the hosts. Fix: connect = \"public\": your address, e.g. [\"203.0.113.7/32\"]; \"private\": your VPN or VPC range, e.g. [\"10.0.0.0/16\"]; \"bastion\": the bastion's private address, e.g. [\"10.0.0.5/32\"]."
  }
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
  nullable    = false
}

variable "egress_cidrs" {
  description = "IPv4 CIDRs hosts may reach on 80/443 (package mirrors, S3, the NVIDIA repositories). Traffic between hosts on tf_port is always allowed."
  type        = list(string)
  default     = ["0.0.0.0/0"]
  nullable    = false

  validation {
    condition     = alltrue([for c in var.egress_cidrs : can(cidrhost(c, 0))])
    error_message = "egress_cidrs has an entry that is not a CIDR. Fix: e.g. \"0.0.0.0/0\" or \"10.0.0.0/8\"."
  }
}

variable "tf_port" {
  description = "TensorFlow gRPC port every task listens on; open only between members of the cluster security group."
  type        = number
  default     = 2222
  nullable    = false

  validation {
    condition     = var.tf_port >= 1024 && var.tf_port <= 65535 && floor(var.tf_port) == var.tf_port && var.tf_port != 22
    error_message = "tf_port must be a whole number from 1024 to 65535, not 22. Fix: leave it unset for the default training port, or pick another unprivileged port."
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
  default  = {}
  nullable = false

  validation {
    condition     = var.spot.max_price == null || try(tonumber(var.spot.max_price) > 0, false)
    error_message = "spot.max_price must be a positive price in USD per hour as a string. Fix: write e.g. \"1.20\", or null for up to the on-demand price."
  }
  validation {
    condition     = !var.spot.enabled || var.checkpoint_s3 != null || var.spot_without_backups
    error_message = "spot.enabled without checkpoint_s3: AWS may reclaim a spot host at any time, and a one-time spot request then terminates it with its root volume, so every backup on it is lost. Fix: set checkpoint_s3 = { bucket = \"my-training-bucket\", prefix = \"tfcluster/checkpoints\" } (each host mirrors its backups there and a re-run resumes from them), or set spot_without_backups = true to accept losing them, or turn spot off."
  }
}

variable "spot_without_backups" {
  description = "Allow spot hosts without checkpoint_s3. A reclaimed spot host is terminated with its root volume, so its backups are lost and a re-run starts over; by default spot needs checkpoint_s3."
  type        = bool
  default     = false
  nullable    = false
}

variable "placement_group" {
  description = "Create a cluster placement group (low-latency network between hosts). Off for the local emulator, which does not implement placement groups."
  type        = bool
  default     = false
  nullable    = false
}

variable "launch_instances" {
  description = "Launch the hosts here. false: the module builds everything else (network, security group, key, IAM, AMI, tags) and a root launches the hosts from the launch output, as infra/examples/efa does to attach EFA interfaces at launch (which needs a newer provider than this module)."
  type        = bool
  default     = true
  nullable    = false
}

variable "efa" {
  description = "The hosts use EFA interfaces in this module's security group (infra/examples/efa): members admit all traffic from each other, every protocol, as EFA requires (instead of all TCP for NCCL)."
  type        = bool
  default     = false
  nullable    = false
}

variable "capacity" {
  description = "Where the hosts' capacity comes from. preference \"open\" (default: an open On-Demand Capacity Reservation that matches type and zone is used automatically, else plain On-Demand) or \"none\" (never a reservation); reservation_id = \"cr-...\": only that reservation (an On-Demand Capacity Reservation, or with capacity_block = true a Capacity Block for ML, launched with market type capacity-block). reservation_id, none and capacity_block need aws_instance arguments that hashicorp/aws 3.39 lacks: the hosts are then launched by infra/examples/efa (launch_instances = false)."
  type = object({
    preference     = optional(string, "open")
    reservation_id = optional(string)
    capacity_block = optional(bool, false)
  })
  default  = {}
  nullable = false

  validation {
    condition     = contains(["open", "none"], var.capacity.preference)
    error_message = "capacity.preference must be \"open\" or \"none\". Fix: \"open\" uses a matching open Capacity Reservation when there is one, \"none\" never uses one; to use one reservation set reservation_id instead."
  }
  validation {
    condition     = var.capacity.reservation_id == null || can(regex("^cr-[0-9a-f]{8,17}$", coalesce(var.capacity.reservation_id, "-")))
    error_message = "capacity.reservation_id must look like \"cr-0123456789abcdef0\". Fix: copy the id from the EC2 console (Capacity Reservations), or leave it null."
  }
  validation {
    condition     = var.capacity.reservation_id == null || var.capacity.preference == "open"
    error_message = "capacity.reservation_id and preference = \"none\" contradict each other (EC2 takes a preference or a target, not both). Fix: keep reservation_id to launch into that reservation, or drop it for preference \"none\"."
  }
  validation {
    condition     = !var.capacity.capacity_block || var.capacity.reservation_id != null
    error_message = "capacity.capacity_block needs the Capacity Block's reservation id. Fix: set capacity = { capacity_block = true, reservation_id = \"cr-...\" } (EC2 console: Capacity Reservations, the block's id)."
  }
  validation {
    condition     = !var.spot.enabled || (var.capacity.reservation_id == null && var.capacity.preference == "open")
    error_message = "spot.enabled with a Capacity Reservation or Capacity Block: spot hosts never launch into reservations. Fix: turn spot off to use the reservation, or drop capacity.reservation_id / preference."
  }
  validation {
    condition     = !var.launch_instances || (var.capacity.reservation_id == null && var.capacity.preference == "open")
    error_message = "capacity.reservation_id, capacity_block and preference = \"none\" need the capacity reservation and market type arguments of aws_instance, which hashicorp/aws 3.39 (the provider this module validates on) lacks. Fix: launch the hosts from infra/examples/efa (hashicorp/aws >= 6.10; it also attaches EFA where the type has it), which passes capacity to each host, or keep capacity = {} (an open reservation matching type and zone is used anyway)."
  }
}

variable "root_volume_size" {
  description = "Root volume size in GiB (encrypted gp3)."
  type        = number
  default     = 200
  nullable    = false

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

variable "root_volume_throughput" {
  description = "Throughput of each gp3 root volume in MiB/s (125-1000; at most 0.25 MiB/s per provisioned IOPS). null: gp3's baseline, 125."
  type        = number
  default     = null

  validation {
    condition     = var.root_volume_throughput == null || try(var.root_volume_throughput >= 125 && var.root_volume_throughput <= 1000 && floor(var.root_volume_throughput) == var.root_volume_throughput, false)
    error_message = "root_volume_throughput must be a whole number of MiB/s from 125 to 1000 (gp3 at launch). Fix: e.g. 500, or null for the baseline 125."
  }
  validation {
    condition     = var.root_volume_throughput == null || try(var.root_volume_throughput <= 0.25 * coalesce(var.root_volume_iops, 3000), true)
    error_message = "root_volume_throughput is above 0.25 MiB/s per IOPS of root_volume_iops (3000 when null), gp3's limit. Fix: raise root_volume_iops to at least 4 x the throughput (e.g. 4000 for 1000 MiB/s), or lower the throughput."
  }
}

variable "root_volume_iops" {
  description = "Provisioned IOPS of each gp3 root volume (3000-16000). null: gp3's baseline, 3000."
  type        = number
  default     = null

  validation {
    condition     = var.root_volume_iops == null || try(var.root_volume_iops >= 3000 && var.root_volume_iops <= 16000 && floor(var.root_volume_iops) == var.root_volume_iops, false)
    error_message = "root_volume_iops must be a whole number from 3000 to 16000 (gp3). Fix: e.g. 6000, or null for the baseline 3000."
  }
}

variable "metadata_hop_limit" {
  description = "IMDSv2 response hop limit (1: only the host itself; 2: also containers on the host)."
  type        = number
  default     = 1
  nullable    = false

  validation {
    condition     = var.metadata_hop_limit >= 1 && var.metadata_hop_limit <= 64
    error_message = "metadata_hop_limit must be from 1 to 64. Fix: 1 (only the host) or 2 (also containers on the host)."
  }
}

variable "monitoring" {
  description = "Detailed (1-minute) CloudWatch monitoring."
  type        = bool
  default     = true
  nullable    = false
}

# ---------------------------------------------------------------------------------------------------------------
# Reachability: how the control machine reaches the hosts (the inventory reads the connect and bastion outputs)
# ---------------------------------------------------------------------------------------------------------------
variable "connect" {
  description = "How Ansible reaches the hosts: \"public\" (their public IPs), \"private\" (their private IPs: a VPN, or a control machine inside the VPC), or \"bastion\" (their private IPs through the jump host in bastion)."
  type        = string
  default     = "public"
  nullable    = false

  validation {
    condition     = contains(["public", "private", "bastion"], var.connect)
    error_message = "connect must be \"public\", \"private\" or \"bastion\". Fix: \"public\" to reach hosts by public IP, \"private\" through a VPN or from inside the VPC, \"bastion\" through a jump host."
  }
  validation {
    condition     = var.connect != "bastion" || var.bastion != null
    error_message = "connect = \"bastion\" needs the jump host. Fix: set bastion = { address = \"203.0.113.10\", user = \"ec2-user\" } (port defaults to 22), or choose connect = \"public\" or \"private\"."
  }
}

variable "bastion" {
  description = "The jump host you already have, for connect = \"bastion\": address (as the control machine reaches it), user, port. It must reach the hosts' private IPs, and allowed_ssh_cidrs must admit the address it connects from as the hosts see it (its private IP in the VPC): the module checks that for a private IPv4 address and assumes it otherwise."
  type = object({
    address = string
    user    = string
    port    = optional(number, 22)
  })
  default = null

  validation {
    condition     = var.bastion == null || try(can(regex("^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$", var.bastion.address)) && can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.bastion.user)) && var.bastion.port >= 1 && var.bastion.port <= 65535 && floor(var.bastion.port) == var.bastion.port, false)
    error_message = "bastion must be { address = host name or IP, user = POSIX user name, port = 1-65535 }. Fix: e.g. { address = \"203.0.113.10\", user = \"ec2-user\", port = 22 }."
  }
  validation {
    condition     = var.bastion == null || !can(regex("^(10|172\\.(1[6-9]|2[0-9]|3[01])|192\\.168|100\\.(6[4-9]|[7-9][0-9]|1[01][0-9]|12[0-7]))\\.[0-9.]+$", var.bastion.address)) || anytrue([for c in var.allowed_ssh_cidrs : try(cidrhost("${var.bastion.address}/${split("/", c)[1]}", 0) == cidrhost(c, 0), false)])
    error_message = "allowed_ssh_cidrs does not admit the bastion's private address, so the bastion could not reach the hosts. Fix: add \"<bastion address>/32\" (or its subnet) to allowed_ssh_cidrs."
  }
}

variable "associate_public_ip" {
  description = "Give each host a public IP. null: yes when connect = \"public\", and also in a VPC the module creates (its only way out to the internet is the internet gateway; SSH stays limited to allowed_ssh_cidrs); no in an existing subnet_id otherwise."
  type        = bool
  default     = null

  validation {
    condition     = !(var.connect == "public" && var.associate_public_ip == false)
    error_message = "connect = \"public\" with associate_public_ip = false: the hosts would have no address the control machine can reach. Fix: leave associate_public_ip null (or true), or use connect = \"private\" (VPN, control machine in the VPC) or \"bastion\"."
  }
}

variable "user_data" {
  description = "Your cloud-init user data for every host: a #cloud-config document, a #! script or a #include list. It goes to cloud-init beside the module's boot guard (a MIME multipart; the guard's write_files and runcmd are appended to yours). Runs once, at the first boot: later changes do not reach running hosts."
  type        = string
  default     = null

  validation {
    condition     = var.user_data == null || anytrue([for marker in ["#cloud-config", "#!", "#include"] : startswith(coalesce(var.user_data, "-"), marker)])
    error_message = "user_data must begin with #cloud-config, #! or #include: the module sends it to cloud-init as one part of a MIME multipart beside the boot guard. Fix: give one #cloud-config document (or one #! script), not a MIME document or gzip data."
  }
  validation {
    condition     = var.user_data == null || !strcontains(coalesce(var.user_data, "-"), "==tfcluster-boot-guard-7f3c==")
    error_message = "user_data contains the module's MIME boundary ==tfcluster-boot-guard-7f3c==. Fix: remove that string from user_data."
  }
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
    error_message = "subnet_id must look like \"subnet-0123456789abcdef0\". Fix: copy the id from the VPC console, or leave it null to create a VPC."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the VPC created when subnet_id is null; the hosts' subnet is its first /24 (for a /16)."
  type        = string
  default     = "10.42.0.0/16"
  nullable    = false

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && try(tonumber(split("/", var.vpc_cidr)[1]) >= 16 && tonumber(split("/", var.vpc_cidr)[1]) <= 20, false)
    error_message = "vpc_cidr must be an IPv4 CIDR of /16 to /20. Fix: e.g. \"10.42.0.0/16\"."
  }
}

variable "availability_zone" {
  description = "Availability zone of the created subnet. null: the first zone (sorted) that offers instance_type. A zone that does not offer it is refused at plan, with the list of zones that do."
  type        = string
  default     = null

  validation {
    condition     = var.availability_zone == null || var.subnet_id == null
    error_message = "availability_zone and subnet_id are both set: an existing subnet already decides the zone. Fix: leave availability_zone null (the plan checks that the subnet's zone offers instance_type)."
  }
}

variable "flow_log_destination_arn" {
  description = "S3 bucket ARN that receives VPC flow logs of the created VPC. null: no flow logs."
  type        = string
  default     = null
}

# ---------------------------------------------------------------------------------------------------------------
# Cost guard
# ---------------------------------------------------------------------------------------------------------------
variable "autostop_idle_minutes" {
  description = "Boot guard: power a host off when no tfcluster job unit has been active for this many minutes since boot (0: no idle stop). Written into the user data with expires_at; the autostop role takes the same settings over when the host is prepared (make autostop IDLE=... changes them later)."
  type        = number
  default     = 30
  nullable    = false

  validation {
    condition     = var.autostop_idle_minutes >= 0 && var.autostop_idle_minutes <= 525600 && floor(var.autostop_idle_minutes) == var.autostop_idle_minutes
    error_message = "autostop_idle_minutes must be a whole number of minutes from 0 (off) to 525600 (a year). Fix: e.g. 30 (IDLE=30m), or 0 to keep idle hosts up (IDLE=off; expires_at still stops them)."
  }
}

variable "autostop_down" {
  description = "What a host that powers itself off (the autostop role after IDLE minutes) becomes: \"stop\" (EBS kept, no compute cost; start it again later) or \"terminate\" (gone, root volume deleted). Spot hosts (one-time requests) can only terminate."
  type        = string
  default     = "stop"
  nullable    = false

  validation {
    condition     = contains(["stop", "terminate"], var.autostop_down)
    error_message = "autostop_down must be \"stop\" or \"terminate\". Fix: \"stop\" keeps the disks (AUTOSTOP_DOWN unset), \"terminate\" removes the host (DOWN=1)."
  }
  validation {
    condition     = !var.spot.enabled || var.autostop_down == "terminate"
    error_message = "Spot hosts are one-time spot requests, which cannot be stopped: autostop_down = \"stop\" is impossible. Fix: set autostop_down = \"terminate\" (its root volume is deleted: set checkpoint_s3 to keep backups), or turn spot off."
  }
}

variable "expires_at" {
  description = "RFC 3339 UTC time (\"2030-01-31T18:00:00Z\") after which the cluster counts as forgotten: written as the tfcluster:expires tag of every host. The CLI computes it from TTL (default 24 h for aws). null: no tag."
  type        = string
  default     = null

  validation {
    condition     = var.expires_at == null || try(can(regex("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$", var.expires_at)) && can(timeadd(var.expires_at, "0s")), false)
    error_message = "expires_at must be an RFC 3339 UTC time without fractions. Fix: write e.g. \"2030-01-31T18:00:00Z\" (the CLI computes it from TTL), or null for no expiry tag."
  }
}

# ---------------------------------------------------------------------------------------------------------------
# IAM
# ---------------------------------------------------------------------------------------------------------------
variable "checkpoint_s3" {
  description = "S3 location the hosts may read and write checkpoints under (bucket and key prefix, no leading/trailing '/'); kms_key_arn: the KMS key that encrypts it (SSE-KMS), which the hosts may then use for objects under the prefix only (kms:Decrypt, kms:GenerateDataKey through S3). null: no S3 access."
  type = object({
    bucket      = string
    prefix      = string
    kms_key_arn = optional(string)
  })
  default = null

  validation {
    condition     = var.checkpoint_s3 == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.checkpoint_s3.bucket))
    error_message = "checkpoint_s3.bucket must be a bucket name, not an s3:// URI or ARN. Fix: e.g. \"my-training-bucket\"."
  }
  validation {
    condition     = var.checkpoint_s3 == null || can(regex("^[^/].*[^/]$", var.checkpoint_s3.prefix))
    error_message = "checkpoint_s3.prefix must be a non-empty key prefix without a leading or trailing '/'. Fix: e.g. \"tfcluster/checkpoints\"."
  }
  validation {
    condition     = try(var.checkpoint_s3.kms_key_arn == null, true) || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/(mrk-)?[0-9a-f-]{32,36}$", var.checkpoint_s3.kms_key_arn))
    error_message = "checkpoint_s3.kms_key_arn must be a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/KEY-ID), not an alias or a key id alone. Fix: copy the key's ARN from the KMS console, or leave it null for SSE-S3 buckets."
  }
}

variable "data_s3" {
  description = "S3 location the hosts may read datasets from (read only: list the prefix, get its objects); kms_key_arn: the KMS key its objects are encrypted with (kms:Decrypt through S3 only). prefix \"\" is the whole bucket. null: no read access beyond checkpoint_s3."
  type = object({
    bucket      = string
    prefix      = optional(string, "")
    kms_key_arn = optional(string)
  })
  default = null

  validation {
    condition     = var.data_s3 == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.data_s3.bucket))
    error_message = "data_s3.bucket must be a bucket name, not an s3:// URI or ARN. Fix: e.g. \"my-datasets\"."
  }
  validation {
    condition     = try(var.data_s3.prefix == "", true) || can(regex("^[^/](.*[^/])?$", var.data_s3.prefix))
    error_message = "data_s3.prefix must be a key prefix without a leading or trailing '/' (\"\" for the whole bucket). Fix: e.g. \"datasets/mnist\"."
  }
  validation {
    condition     = try(var.data_s3.kms_key_arn == null, true) || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/(mrk-)?[0-9a-f-]{32,36}$", var.data_s3.kms_key_arn))
    error_message = "data_s3.kms_key_arn must be a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/KEY-ID). Fix: copy the key's ARN from the KMS console, or leave it null."
  }
}

variable "create_instance_profile" {
  description = "Create one IAM role and instance profile per slot (with the checkpoint_s3 policy when set: each host may write only its own backup/<slot>/ keys, and only the chief also model/)."
  type        = bool
  default     = true
  nullable    = false
}

variable "iam_instance_profile" {
  description = "Existing instance profile name for every host, instead of one created per slot (create_instance_profile is then ignored; what it may do in checkpoint_s3 is then yours to scope)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Extra tags for every resource. The tfcluster:* keys are reserved for the module."
  type        = map(string)
  default     = {}
  nullable    = false

  validation {
    condition     = !anytrue([for k in keys(var.tags) : startswith(k, "tfcluster:")])
    error_message = "tags uses a reserved tfcluster:* key. Fix: remove it; the module writes every tfcluster:* tag itself (cluster, task_type, task_index, port, gpus, ssh_user, expires)."
  }
}
