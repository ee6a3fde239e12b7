terraform {
  # 1.9: validation blocks may refer to other variables (allowed_ssh_cidrs <-> allow_ssh_from_anywhere).
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 3.39.0 is the version the offline tests run against; every resource and argument used here also
      # exists in current releases. Newer-only features (EFA interface_type) live in ../efa_network.
      version = ">= 3.39.0"
    }
  }
}
