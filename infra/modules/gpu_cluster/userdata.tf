# The hosts' user data: the boot guard (a cost guard from the first minute) and, when given, the user's own part.
#
# The boot guard (templates/cloud-config.yaml.tpl, files/boot_guard.py) powers a host off when no tfcluster job unit
# has been active for autostop_idle_minutes since boot, and past expires_at, so a host that is never prepared still
# stops. It writes the files the autostop role takes over when the host is prepared, under the same names:
#   /etc/tfcluster/autostop.json       the settings (local.autostop_settings, tfcluster/host/autostop.py's keys)
#   /var/lib/tfcluster/autostop/       the state (state.json, the checker's format)
#   tfcluster.autostop.{service,timer} the check every 60 s (the role replaces the service, not the timer's name)
#   /usr/local/bin/tfcluster-autostop  check|status (the role replaces it with its checker's wrapper)
# The expiry is a value written at apply: reading the instance's tags from IMDS needs instance_metadata_tags, which
# hashicorp/aws 3.39 does not have. User data runs once per instance; the instances ignore later changes of it.

locals {
  autostop_interval = 60 # seconds between two checks: the autostop role's autostop_interval_seconds default
  # Guarding at all: an idle time (0 is off) or an expiry.
  autostop_guard = var.autostop_idle_minutes > 0 || var.expires_at != null
  # tfcluster/host/autostop.py load_config's keys, plus expires_at (the checker the role installs enforces it too).
  autostop_settings = {
    enabled                   = var.autostop_idle_minutes > 0
    idle_minutes              = var.autostop_idle_minutes > 0 ? var.autostop_idle_minutes : 30
    mode                      = "jobs"
    gpu_idle_percent          = 0
    gpu_idle_window_minutes   = 30
    terminate                 = var.autostop_down == "terminate"
    uncollected_grace_minutes = 1440
    expires_at                = var.expires_at
  }
  boot_guard = templatefile("${path.module}/templates/cloud-config.yaml.tpl", {
    settings = jsonencode(local.autostop_settings)
    guard    = base64gzip(file("${path.module}/files/boot_guard.py"))
    interval = local.autostop_interval
    enable   = local.autostop_guard
  })

  # The user's part first, the guard last: its X-Merge-Type appends its write_files and runcmd to a user's
  # cloud-config instead of replacing them (cloud-init's default merge replaces lists).
  mime_boundary = "==tfcluster-boot-guard-7f3c=="
  user_part_type = {
    "#cloud-config" = "text/cloud-config"
    "#!"            = "text/x-shellscript"
    "#include"      = "text/x-include-url"
  }
  user_data_type = try([for marker, type in local.user_part_type : type if startswith(coalesce(var.user_data, "-"), marker)][0], null)
  user_data = var.user_data == null ? local.boot_guard : join("\r\n", [
    "Content-Type: multipart/mixed; boundary=\"${local.mime_boundary}\"",
    "MIME-Version: 1.0",
    "",
    "--${local.mime_boundary}",
    "Content-Type: ${coalesce(local.user_data_type, "text/plain")}",
    "MIME-Version: 1.0",
    "Content-Transfer-Encoding: 7bit",
    "",
    var.user_data,
    "--${local.mime_boundary}",
    "Content-Type: text/cloud-config",
    "MIME-Version: 1.0",
    "Content-Transfer-Encoding: 7bit",
    "X-Merge-Type: list(append)+dict(no_replace,recurse_list)+str()",
    "",
    local.boot_guard,
    "--${local.mime_boundary}--",
    "",
  ])
  user_data_limit = 16384 # EC2: 16 KB of raw user data, before base64
}
