terraform {
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # aws_network_interface.interface_type arrived after 3.39.0, so this module is NOT covered by the offline
      # tests (the mirror holds 3.39.0 only); gpu_cluster consumes its output through network_interface_ids.
      version = ">= 4.0.0"
    }
  }
}
