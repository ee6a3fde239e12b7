# Issue 12: a host that powers itself off is stopped (default) or terminated; spot hosts can only terminate.

mock_provider "aws" {
  mock_data "aws_availability_zones" {
    defaults = { names = ["us-east-1a"] }
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

run "power_off_stops_by_default" {
  command = plan

  assert {
    condition     = alltrue([for i in aws_instance.this : i.instance_initiated_shutdown_behavior == "stop"]) && output.autostop_down == "stop"
    error_message = "autostop_down defaults to stop"
  }
  assert {
    condition     = output.expires_at == null && output.checkpoint_s3 == null
    error_message = "no expiry and no checkpoint bucket by default"
  }
}

run "power_off_terminates_when_asked" {
  command = plan
  variables {
    autostop_down = "terminate"
    expires_at    = "2030-01-31T18:00:00Z"
    checkpoint_s3 = { bucket = "my-bucket", prefix = "tfcluster/ckpt" }
  }

  assert {
    condition     = alltrue([for i in aws_instance.this : i.instance_initiated_shutdown_behavior == "terminate"]) && output.autostop_down == "terminate"
    error_message = "autostop_down = terminate"
  }
  assert {
    condition     = output.expires_at == "2030-01-31T18:00:00Z" && output.checkpoint_s3 == "s3://my-bucket/tfcluster/ckpt"
    error_message = "expires_at and checkpoint_s3 (as an s3:// URL) are outputs the CLI reads"
  }
}

run "spot_terminates" {
  command = plan
  variables {
    spot          = { enabled = true }
    autostop_down = "terminate"
    checkpoint_s3 = { bucket = "my-bucket", prefix = "tfcluster/ckpt" }
  }

  assert {
    condition     = alltrue([for r in aws_spot_instance_request.this : r.instance_initiated_shutdown_behavior == "terminate" && r.spot_type == "one-time"])
    error_message = "one-time spot hosts terminate on power-off"
  }
}
