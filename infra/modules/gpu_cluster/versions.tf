terraform {
  # 1.9: validation blocks may refer to other variables (connect <-> bastion, autostop_down <-> spot, ...).
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # A minimum only (the roots set the upper bound). 3.39.0 is the version the offline tests validate, plan and
      # apply; nothing used here is removed or deprecated in 6.x (docs/infra.md lists each resource checked).
      # Newer-only features (EFA at launch: aws_instance.primary_network_interface) live in ../../examples/efa.
      version = ">= 3.39.0"
    }
  }
}
