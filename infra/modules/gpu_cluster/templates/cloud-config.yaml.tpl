#cloud-config
# tfcluster boot guard (infra/modules/gpu_cluster/userdata.tf): the host's idle and expiry check from its first boot,
# so a host that is never prepared still stops. The autostop role takes over the same files and the same timer.
# cloud-init writes these once per instance (write_files, runcmd): a later boot keeps what the role wrote.
write_files:
  - path: /etc/tfcluster/autostop.json
    owner: root:root
    permissions: "0644"
    content: |
      ${settings}
  - path: /opt/tfcluster/autostop/boot_guard.py
    owner: root:root
    permissions: "0755"
    encoding: gz+b64
    content: ${guard}
  - path: /usr/local/bin/tfcluster-autostop
    owner: root:root
    permissions: "0755"
    content: |
      #!/bin/sh
      # tfcluster-autostop check|status: the boot guard, until the autostop role installs its checker here.
      exec /usr/bin/python3 /opt/tfcluster/autostop/boot_guard.py "$@"
  - path: /etc/systemd/system/tfcluster.autostop.service
    owner: root:root
    permissions: "0644"
    content: |
      # tfcluster boot guard: one idle and expiry check (the autostop role replaces this unit with its checker's).
      [Unit]
      Description=tfcluster idle autostop check (boot guard)
      ConditionPathExists=/etc/tfcluster/autostop.json

      [Service]
      Type=oneshot
      ExecStart=/usr/bin/python3 /opt/tfcluster/autostop/boot_guard.py check
      CapabilityBoundingSet=CAP_DAC_READ_SEARCH
      NoNewPrivileges=true
      UMask=0022
      ProtectSystem=strict
      StateDirectory=tfcluster/autostop
      StateDirectoryMode=0755
      ProtectHome=read-only
      PrivateTmp=true
      PrivateNetwork=true
      DevicePolicy=closed
      ProtectKernelTunables=true
      ProtectKernelModules=true
      ProtectKernelLogs=true
      ProtectControlGroups=true
      ProtectClock=true
      ProtectHostname=true
      RestrictAddressFamilies=AF_UNIX
      RestrictNamespaces=true
      RestrictRealtime=true
      RestrictSUIDSGID=true
      LockPersonality=true
      MemoryDenyWriteExecute=true
      SystemCallArchitectures=native
      SystemCallFilter=@system-service
  - path: /etc/systemd/system/tfcluster.autostop.timer
    owner: root:root
    permissions: "0644"
    content: |
      [Unit]
      Description=tfcluster idle autostop: check every ${interval} s

      [Timer]
      OnBootSec=${interval}s
      OnUnitActiveSec=${interval}s
      AccuracySec=1s

      [Install]
      WantedBy=timers.target
runcmd:
  - [systemctl, daemon-reload]
%{ if enable ~}
  - [systemctl, enable, --now, tfcluster.autostop.timer]
%{ endif ~}
