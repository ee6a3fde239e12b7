# Issue 22: the cost guard from the first minute. Every host's user data carries the boot guard (files/boot_guard.py,
# its settings, the tfcluster.autostop service and timer) with the configured idle time and expiry; a user's own
# cloud-init part goes beside it; bad input is refused at plan.

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

run "guard_by_default_idle_30_no_expiry" {
  command = plan

  assert {
    condition     = startswith(output.launch.user_data, "#cloud-config\n") && alltrue([for i in aws_instance.this : i.user_data == output.launch.user_data])
    error_message = "every host gets the boot guard as its cloud-config user data"
  }
  assert {
    condition     = output.autostop.guard && jsonencode(output.autostop.settings) == jsonencode({ enabled = true, expires_at = null, gpu_idle_percent = 0, gpu_idle_window_minutes = 30, idle_minutes = 30, mode = "jobs", terminate = false, uncollected_grace_minutes = 1440 })
    error_message = "the settings: the autostop role's keys, idle 30 min, no expiry, stop (not terminate)"
  }
  assert {
    condition     = strcontains(output.launch.user_data, "      ${jsonencode(output.autostop.settings)}\n") && strcontains(output.launch.user_data, "- path: /etc/tfcluster/autostop.json\n")
    error_message = "the settings land in /etc/tfcluster/autostop.json, the file the autostop role keeps"
  }
  assert {
    condition     = strcontains(output.launch.user_data, "    content: ${base64gzip(file("files/boot_guard.py"))}\n") && strcontains(output.launch.user_data, "- path: /opt/tfcluster/autostop/boot_guard.py\n    owner: root:root\n    permissions: \"0755\"\n    encoding: gz+b64\n")
    error_message = "the guard script itself, gzipped, executable"
  }
  assert {
    condition     = strcontains(output.launch.user_data, "- path: /etc/systemd/system/tfcluster.autostop.timer\n") && strcontains(output.launch.user_data, "OnUnitActiveSec=60s") && strcontains(output.launch.user_data, "ExecStart=/usr/bin/python3 /opt/tfcluster/autostop/boot_guard.py check")
    error_message = "a check every 60 s through tfcluster.autostop.service/.timer, the names the role takes over"
  }
  assert {
    condition     = strcontains(output.launch.user_data, "  - [systemctl, enable, --now, tfcluster.autostop.timer]\n")
    error_message = "the timer is started at boot"
  }
  assert {
    condition     = length(output.launch.user_data) < 12000
    error_message = "the guard leaves room for the user's own part in EC2's 16 KB"
  }
}

run "idle_and_expiry_are_written_at_apply" {
  command = plan
  variables {
    autostop_idle_minutes = 45
    expires_at            = "2030-01-31T18:00:00Z"
  }

  assert {
    condition     = strcontains(aws_instance.this["worker-1"].user_data, "\"expires_at\":\"2030-01-31T18:00:00Z\"") && strcontains(aws_instance.this["worker-1"].user_data, "\"idle_minutes\":45") && strcontains(aws_instance.this["worker-1"].user_data, "\"enabled\":true")
    error_message = "the rendered user data holds the configured idle time and expiry"
  }
  assert {
    condition     = aws_instance.this["chief-0"].tags[output.tag_keys.expires] == "2030-01-31T18:00:00Z"
    error_message = "the same expiry as the tag"
  }
}

run "idle_off_keeps_the_expiry_guard" {
  command = plan
  variables {
    autostop_idle_minutes = 0
    expires_at            = "2030-01-31T18:00:00Z"
  }

  assert {
    condition     = output.autostop.guard && !output.autostop.settings.enabled && output.autostop.settings.idle_minutes == 30 && strcontains(output.launch.user_data, "enable, --now, tfcluster.autostop.timer")
    error_message = "IDLE=off: no idle stop (enabled false; idle_minutes stays a valid 30), but the expiry still runs the timer"
  }
}

run "no_idle_no_expiry_no_timer" {
  command = plan
  variables { autostop_idle_minutes = 0 }

  assert {
    condition     = !output.autostop.guard && !output.autostop.settings.enabled && !strcontains(output.launch.user_data, "enable, --now") && strcontains(output.launch.user_data, "/etc/tfcluster/autostop.json")
    error_message = "nothing to guard: the settings are written (the role keeps them) but the timer stays off"
  }
}

run "spot_terminate_settings" {
  command = plan
  variables {
    spot          = { enabled = true }
    autostop_down = "terminate"
    checkpoint_s3 = { bucket = "my-bucket", prefix = "ckpt" }
  }

  assert {
    condition     = output.autostop.settings.terminate && alltrue([for r in aws_spot_instance_request.this : r.user_data == output.launch.user_data && strcontains(r.user_data, "\"terminate\":true")])
    error_message = "spot hosts carry the guard too, and their power-off terminates"
  }
}

run "user_cloud_config_goes_first_the_guard_appends" {
  command = plan
  variables { user_data = "#cloud-config\npackages: [htop]\nruncmd:\n  - [touch, /root/mine]\n" }

  assert {
    condition     = startswith(output.launch.user_data, "Content-Type: multipart/mixed; boundary=\"==tfcluster-boot-guard-7f3c==\"\r\nMIME-Version: 1.0\r\n\r\n--==tfcluster-boot-guard-7f3c==\r\nContent-Type: text/cloud-config\r\n")
    error_message = "a MIME multipart whose first part is the user's cloud-config"
  }
  assert {
    condition     = strcontains(output.launch.user_data, "\r\n\r\n#cloud-config\npackages: [htop]\nruncmd:\n  - [touch, /root/mine]\n\r\n--==tfcluster-boot-guard-7f3c==\r\n")
    error_message = "the user's part verbatim"
  }
  assert {
    condition     = strcontains(output.launch.user_data, "X-Merge-Type: list(append)+dict(no_replace,recurse_list)+str()\r\n\r\n#cloud-config\n") && endswith(output.launch.user_data, "\r\n--==tfcluster-boot-guard-7f3c==--\r\n")
    error_message = "the guard last, its lists appended to the user's (runcmd, write_files)"
  }
}

run "user_script_part" {
  command = plan
  variables { user_data = "#!/bin/sh\necho hello\n" }

  assert {
    condition     = strcontains(output.launch.user_data, "Content-Type: text/x-shellscript\r\nMIME-Version: 1.0\r\nContent-Transfer-Encoding: 7bit\r\n\r\n#!/bin/sh\necho hello\n")
    error_message = "a #! script becomes a text/x-shellscript part"
  }
}

run "idle_negative" {
  command = plan
  variables { autostop_idle_minutes = -1 }
  expect_failures = [var.autostop_idle_minutes]
}

run "idle_fractional" {
  command = plan
  variables { autostop_idle_minutes = 1.5 }
  expect_failures = [var.autostop_idle_minutes]
}

run "idle_over_a_year" {
  command = plan
  variables { autostop_idle_minutes = 600000 }
  expect_failures = [var.autostop_idle_minutes]
}

run "user_data_not_cloud_init" {
  command = plan
  variables { user_data = "echo no marker" }
  expect_failures = [var.user_data]
}

run "user_data_with_the_boundary" {
  command = plan
  variables { user_data = "#!/bin/sh\necho ==tfcluster-boot-guard-7f3c==\n" }
  expect_failures = [var.user_data]
}

run "user_data_over_16k" {
  command = plan
  variables { user_data = "#!/bin/sh\n${join("\n", [for i in range(700) : "echo padding-line-${i}"])}\n" }
  expect_failures = [aws_security_group.this]
}
