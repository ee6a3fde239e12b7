terraform {
  # 1.9: validation blocks that refer to other variables.
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # The offline mirror's 3.39.0 (the demo and the tests run offline); the committed lock file pins it.
      version = ">= 3.39.0, < 7.0.0"
    }
  }
}
