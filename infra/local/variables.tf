variable "endpoint" {
  description = "URL of the emulated AWS endpoint (tfcluster/provision/localaws.py prints it)."
  type        = string
  default     = "http://127.0.0.1:4566"

  validation {
    condition     = can(regex("^http://(127\\.[0-9]+\\.[0-9]+\\.[0-9]+|localhost):[0-9]+$", var.endpoint))
    error_message = "endpoint must be a loopback URL: infra/local never talks to real AWS. Fix: use the URL tfcluster/provision/localaws.py prints, e.g. \"http://127.0.0.1:4566\"."
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
    error_message = "base_port must be from 1024 to 65000 so that every slot's port stays below 65536. Fix: leave it unset for the default, or pick e.g. 23000."
  }
}

variable "local_user" {
  description = "User that runs the local workers (reported as ssh_user; the connection is local)."
  type        = string
  default     = "root"
}

variable "autostop_down" {
  description = "Shutdown behaviour of the emulated instances (stop or terminate); autostop itself does not apply to local slots."
  type        = string
  default     = null
}

variable "expires_at" {
  description = "RFC 3339 UTC expiry written as the tfcluster:expires tag of the emulated instances (null: no tag)."
  type        = string
  default     = null
}
