terraform {
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # aws_instance.primary_network_interface (an EFA as the primary interface, at launch) arrived in 6.10.0. The
      # offline mirror holds 3.39.0 only, so this root is NOT validated by the tests: fmt and checkov only.
      version = ">= 6.10.0, < 7.0.0"
    }
  }
}
