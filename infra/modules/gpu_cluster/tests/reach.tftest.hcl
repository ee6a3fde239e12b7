# Issue 10: how the hosts are reached (connect = public | private | bastion), and clusters nobody could reach are
# refused at plan time (see validation.tftest.hcl for the refusals).

mock_provider "aws" {
  mock_data "aws_availability_zones" {
    defaults = { names = ["us-east-1a", "us-east-1b"] }
  }
  mock_data "aws_ec2_instance_type_offerings" {
    defaults = { instance_types = ["offered"] }
  }
}

variables {
  cluster_name      = "tftest"
  key_name          = "existing"
  allowed_ssh_cidrs = ["203.0.113.7/32"]
}

run "public_by_default" {
  command = plan

  assert {
    condition     = output.connect == "public" && output.bastion == null
    error_message = "connect defaults to public, no bastion"
  }
  assert {
    condition     = alltrue([for i in aws_instance.this : i.associate_public_ip_address])
    error_message = "public hosts get a public IP"
  }
}

run "private_in_existing_subnet_has_no_public_ip" {
  command = plan
  variables {
    connect           = "private"
    subnet_id         = "subnet-0123456789abcdef0"
    allowed_ssh_cidrs = ["10.0.0.0/16"]
  }
  override_data {
    target = data.aws_subnet.existing
    values = { availability_zone = "us-east-1a", vpc_id = "vpc-0123456789abcdef0" }
  }

  assert {
    condition     = output.connect == "private" && alltrue([for i in aws_instance.this : !i.associate_public_ip_address])
    error_message = "private hosts in an existing subnet get no public IP"
  }
}

run "private_in_created_vpc_keeps_egress_ip" {
  command = plan
  variables { connect = "private" }

  assert {
    condition     = alltrue([for i in aws_instance.this : i.associate_public_ip_address])
    error_message = "in a created VPC (internet gateway only) hosts keep a public IP for egress"
  }
}

run "bastion_output" {
  command = plan
  variables {
    connect           = "bastion"
    bastion           = { address = "10.42.0.200", user = "ec2-user" }
    allowed_ssh_cidrs = ["10.42.0.0/24"]
  }

  assert {
    condition     = output.connect == "bastion" && output.bastion == { address = "10.42.0.200", user = "ec2-user", port = 22 }
    error_message = "the bastion output carries address, user and the default port 22"
  }
}

run "bastion_given_by_public_name_is_assumed" {
  command = plan
  variables {
    connect = "bastion"
    bastion = { address = "bastion.example.org", user = "jump", port = 2222 }
  }

  assert {
    condition     = output.bastion.port == 2222 && output.bastion.address == "bastion.example.org"
    error_message = "a bastion given by name (its private address unknown to the module) is accepted"
  }
}

run "bastion_ignored_unless_connect_bastion" {
  command = plan
  variables {
    bastion = { address = "203.0.113.10", user = "ec2-user" }
  }

  assert {
    condition     = output.bastion == null
    error_message = "the bastion output is null unless connect = bastion"
  }
}
