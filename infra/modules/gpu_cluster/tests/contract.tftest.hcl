# Issue 9, one contract: every instance carries every tag key of tfcluster/core/contract.py TAG_KEYS with its value.
# The keys themselves are compared with the contract by tests/unit/infra/test_infra_module_contract.py; here the
# planned tags are read through output.tag_keys, so this file holds no copy of them.

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
  slots             = { chief = 1, worker = 2 }
  key_name          = "existing"
  allowed_ssh_cidrs = ["203.0.113.7/32"]
}

run "instance_tags_carry_every_contract_key" {
  command = plan

  variables {
    instance_type = "g5.12xlarge"
    tf_port       = 2345
    ssh_user      = "ec2-user"
    expires_at    = "2030-01-31T18:00:00Z"
  }

  assert {
    condition     = length(output.tag_keys) == 7 && alltrue([for k, i in aws_instance.this : alltrue([for key in values(output.tag_keys) : contains(keys(i.tags), key)])])
    error_message = "every instance carries all 7 tfcluster:* tag keys"
  }
  assert {
    condition = alltrue([for k, i in aws_instance.this : (
      i.tags[output.tag_keys.cluster] == "tftest" &&
      i.tags[output.tag_keys.port] == "2345" &&
      i.tags[output.tag_keys.gpus] == "4" &&
      i.tags[output.tag_keys.ssh_user] == "ec2-user" &&
      i.tags[output.tag_keys.expires] == "2030-01-31T18:00:00Z" &&
      "${i.tags[output.tag_keys.task_type]}-${i.tags[output.tag_keys.task_index]}" == k
    )])
    error_message = "tags: cluster, port (tf_port), gpus (4 on g5.12xlarge), ssh_user, expires and the slot"
  }
  assert {
    condition     = alltrue([for k, i in aws_instance.this : i.volume_tags[output.tag_keys.cluster] == "tftest" && i.volume_tags[output.tag_keys.task_type] == i.tags[output.tag_keys.task_type]])
    error_message = "root volumes carry the same tags"
  }
  assert {
    condition     = alltrue([for h in output.hosts : h.port == 2345 && h.gpus == 4 && h.ssh_user == "ec2-user"])
    error_message = "the hosts output says what the tags say"
  }
}

run "no_expires_tag_without_expires_at" {
  command = plan

  assert {
    condition     = alltrue([for i in aws_instance.this : !contains(keys(i.tags), output.tag_keys.expires) && i.tags[output.tag_keys.port] == tostring(var.tf_port)])
    error_message = "expires_at null: no expires tag; port tag = the default tf_port"
  }
}

run "spot_instances_get_every_tag" {
  command = plan

  variables {
    spot                 = { enabled = true }
    spot_without_backups = true
    autostop_down        = "terminate"
    expires_at           = "2030-01-31T18:00:00Z"
  }

  assert {
    condition     = alltrue([for slot in ["chief-0", "worker-0", "worker-1"] : alltrue([for key in values(output.tag_keys) : contains(keys(aws_ec2_tag.spot), "${slot}|${key}")])])
    error_message = "the instance of every spot request gets every contract tag"
  }
  assert {
    condition     = aws_ec2_tag.spot["worker-1|${output.tag_keys.task_index}"].value == "1" && aws_ec2_tag.spot["chief-0|${output.tag_keys.expires}"].value == "2030-01-31T18:00:00Z"
    error_message = "spot instance tags carry the slot's values"
  }
}
