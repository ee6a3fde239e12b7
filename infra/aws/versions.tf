terraform {
  # 1.9: validation blocks that refer to other variables.
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # From the registry by default: the newest 6.x (`make tf-upgrade CLUSTER=aws` moves to a newer one). 3.39.0, the
      # offline mirror's, stays admitted: the tests and the AWS twin validate and apply this root with it.
      version = ">= 3.39.0, < 7.0.0"
    }
  }
}
