variable "endpoint" {
  description = "URL of the emulated AWS endpoint (tools/localaws.py prints it)."
  type        = string
  default     = "http://127.0.0.1:4566"

  validation {
    condition     = can(regex("^http://(127\\.[0-9]+\\.[0-9]+\\.[0-9]+|localhost):[0-9]+$", var.endpoint))
    error_message = "endpoint must be a loopback URL like \"http://127.0.0.1:4566\": infra/local never talks to real AWS."
  }
}

variable "cluster_name" {
  description = "Cluster name (tfcluster:cluster tag)."
  type        = string
  default     = "tfcluster-local"
}

variable "slots" {
  description = "Task type -> number of hosts (see the module)."
  type        = map(number)
  default     = { worker = 2 }
}

variable "instance_type" {
  description = "Instance type recorded in the emulator (a GPU type, as on AWS)."
  type        = string
  default     = "g5.xlarge"
}

variable "base_port" {
  description = "Port of the first slot; slot n (in hosts order) listens on base_port + n on 127.0.0.1."
  type        = number
  default     = 22220

  validation {
    condition     = var.base_port >= 1024 && var.base_port <= 65000
    error_message = "base_port must be from 1024 to 65000 so that every slot's port stays below 65536."
  }
}

variable "local_user" {
  description = "User that runs the local workers (reported as ssh_user; the connection is local)."
  type        = string
  default     = "root"
}
