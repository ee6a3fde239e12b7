# Issue 18: spot needs checkpoint_s3 (or an explicit spot_without_backups), and each host's role may write only its
# own backups in checkpoint_s3; only the chief's may write the model dir (trainer/s3.py's keys below PREFIX/<job>).

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
  slots             = { chief = 1, worker = 2 }
}

run "spot_without_checkpoint_s3_is_refused" {
  command = plan
  variables {
    spot          = { enabled = true }
    autostop_down = "terminate"
  }
  expect_failures = [var.spot]
}

run "spot_without_backups_when_asked" {
  command = plan
  variables {
    spot                 = { enabled = true }
    autostop_down        = "terminate"
    spot_without_backups = true
  }

  assert {
    condition     = length(aws_spot_instance_request.this) == 3 && length(aws_iam_role_policy.checkpoints) == 0
    error_message = "spot_without_backups = true: spot hosts without checkpoint_s3 (and no S3 policy)"
  }
}

run "one_role_per_task" {
  command = plan
  variables {
    spot          = { enabled = true }
    autostop_down = "terminate"
    checkpoint_s3 = { bucket = "my-bucket", prefix = "ckpt" }
  }

  assert {
    condition     = toset(keys(aws_iam_role.this)) == toset(["chief-0", "worker-0", "worker-1"]) && toset(keys(aws_iam_instance_profile.this)) == toset(keys(aws_iam_role.this)) && toset(keys(aws_iam_role_policy.checkpoints)) == toset(keys(aws_iam_role.this))
    error_message = "one role, instance profile and checkpoint policy per slot"
  }
  assert {
    condition     = aws_iam_role.this["worker-1"].description == "tfcluster tftest host worker-1"
    error_message = "each role names its slot"
  }
  assert {
    condition     = [for s in jsondecode(aws_iam_role_policy.checkpoints["worker-1"].policy).Statement : s.Resource if s.Effect == "Allow" && s.Sid == "ReadWriteOwnCheckpoints"] == [["arn:aws:s3:::my-bucket/ckpt/*/backup/worker-1/*"]]
    error_message = "a worker may read and write only its own backups"
  }
  assert {
    condition     = alltrue([for s in jsondecode(aws_iam_role_policy.checkpoints["worker-1"].policy).Statement : !(s.Effect == "Allow" && anytrue([for r in s.Resource : strcontains(r, "/model/") || endswith(r, "/ckpt/*")]))])
    error_message = "no Allow of a worker's policy reaches the chief's model/ (nor the whole prefix)"
  }
  assert {
    condition     = contains([for s in jsondecode(aws_iam_role_policy.checkpoints["worker-0"].policy).Statement : s.Resource if s.Effect == "Deny"], ["arn:aws:s3:::my-bucket/ckpt/*/model/*"])
    error_message = "every role but the chief's denies writes to model/ (an S3 * also matches '/')"
  }
  assert {
    condition     = [for s in jsondecode(aws_iam_role_policy.checkpoints["chief-0"].policy).Statement : s.Resource if s.Sid == "ReadWriteOwnCheckpoints"] == [["arn:aws:s3:::my-bucket/ckpt/*/backup/chief-0/*", "arn:aws:s3:::my-bucket/ckpt/*/model/*", "arn:aws:s3:::my-bucket/ckpt/*/backup/local-0/*"]] && !contains([for s in jsondecode(aws_iam_role_policy.checkpoints["chief-0"].policy).Statement : s.Effect], "Deny")
    error_message = "the chief writes its own backups and the model dir"
  }
  assert {
    condition     = alltrue([for p in aws_iam_role_policy.checkpoints : [for s in jsondecode(p.policy).Statement : s.Condition if s.Sid == "ListCheckpointPrefix"] == [{ StringLike = { "s3:prefix" = ["ckpt/*", "ckpt"] } }]])
    error_message = "listing stays scoped to the checkpoint prefix"
  }
}

run "no_chief_slot_worker_0_is_the_chief" {
  command = plan
  variables {
    slots         = { worker = 2 }
    checkpoint_s3 = { bucket = "my-bucket", prefix = "ckpt" }
  }

  assert {
    condition     = strcontains(aws_iam_role_policy.checkpoints["worker-0"].policy, "ckpt/*/model/*") && !strcontains(aws_iam_role_policy.checkpoints["worker-0"].policy, "\"Deny\"") && strcontains(aws_iam_role_policy.checkpoints["worker-1"].policy, "\"Deny\"")
    error_message = "without a chief slot worker 0 is the chief (contract.chief_of) and owns model/"
  }
}

run "given_profile_serves_every_host" {
  command = plan
  variables {
    iam_instance_profile = "my-profile"
    checkpoint_s3        = { bucket = "my-bucket", prefix = "ckpt" }
  }

  assert {
    condition     = length(aws_iam_role.this) == 0 && alltrue([for i in aws_instance.this : i.iam_instance_profile == "my-profile"]) && output.instance_profiles["worker-1"] == "my-profile"
    error_message = "iam_instance_profile is used on every host and no role is created"
  }
}
