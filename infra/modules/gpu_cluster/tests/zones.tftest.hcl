# Issue 10: the hosts' zone offers the instance type. In this mock region us-east-1a does not offer it (as us-east-1e
# does not offer g5.xlarge in the real us-east-1), us-east-1b and us-east-1c do.

mock_provider "aws" {
  mock_data "aws_availability_zones" {
    defaults = { names = ["us-east-1c", "us-east-1a", "us-east-1b"] }
  }
  mock_data "aws_ec2_instance_type_offerings" {
    defaults = { instance_types = ["offered"] }
  }
  override_data {
    target = data.aws_ec2_instance_type_offerings.zone["us-east-1a"]
    values = { instance_types = [] }
  }
}

variables {
  cluster_name      = "tftest"
  key_name          = "existing"
  allowed_ssh_cidrs = ["203.0.113.7/32"]
}

run "first_zone_that_offers_the_type" {
  command = plan

  assert {
    condition     = jsonencode(output.offering_zones) == jsonencode(["us-east-1b", "us-east-1c"]) && output.availability_zone == "us-east-1b"
    error_message = "null availability_zone: the first (sorted) zone that offers the type"
  }
  assert {
    condition     = aws_subnet.this[0].availability_zone == "us-east-1b"
    error_message = "the created subnet is in the chosen zone"
  }
  assert {
    condition     = one([for f in data.aws_ec2_instance_type_offerings.zone["us-east-1c"].filter : f.values[0] if f.name == "instance-type"]) == "g5.xlarge" && data.aws_ec2_instance_type_offerings.zone["us-east-1c"].location_type == "availability-zone"
    error_message = "each zone is asked whether it offers instance_type"
  }
}

run "pinned_zone_that_offers_it" {
  command = plan
  variables { availability_zone = "us-east-1c" }

  assert {
    condition     = aws_subnet.this[0].availability_zone == "us-east-1c"
    error_message = "a pinned zone that offers the type is used"
  }
}

run "pinned_zone_that_does_not_offer_it" {
  command = plan
  variables { availability_zone = "us-east-1a" }
  expect_failures = [aws_security_group.this]
}

run "existing_subnet_in_a_zone_without_it" {
  command = plan
  variables { subnet_id = "subnet-0123456789abcdef0" }
  override_data {
    target = data.aws_subnet.existing
    values = { availability_zone = "us-east-1a", vpc_id = "vpc-0123456789abcdef0" }
  }
  expect_failures = [aws_security_group.this]
}

run "no_zone_offers_it" {
  command = plan
  override_data {
    target = data.aws_ec2_instance_type_offerings.zone
    values = { instance_types = [] }
  }
  expect_failures = [aws_security_group.this]
}
