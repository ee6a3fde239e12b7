variable "cluster_name" {
  description = "Cluster name (same as gpu_cluster's)."
  type        = string
}

variable "slot_names" {
  description = "Slot names that get an EFA interface, e.g. [\"chief-0\", \"worker-0\", \"worker-1\"] (gpu_cluster's hosts[*].name)."
  type        = list(string)

  validation {
    condition     = alltrue([for s in var.slot_names : can(regex("^(chief|ps|worker|evaluator)-[0-9]+$", s))])
    error_message = "slot_names must look like \"worker-0\". Fix: use gpu_cluster's slot names."
  }
}

variable "vpc_id" {
  description = "VPC of the subnet."
  type        = string
}

variable "subnet_id" {
  description = "Subnet of the interfaces (and of the cluster: pass it to gpu_cluster as subnet_id)."
  type        = string
}

variable "allowed_ssh_cidrs" {
  description = "IPv4 CIDRs allowed to reach SSH; /0 is refused."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.allowed_ssh_cidrs : can(cidrhost(c, 0)) && !endswith(c, "/0")])
    error_message = "allowed_ssh_cidrs must be IPv4 CIDRs and not /0. Fix: use your own address, e.g. \"203.0.113.7/32\"."
  }
}

variable "egress_cidrs" {
  description = "CIDRs reachable on 443."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "tags" {
  description = "Extra tags."
  type        = map(string)
  default     = {}
}
