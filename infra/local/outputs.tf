# Same shape as the module's outputs; every slot is served from this machine: 127.0.0.1, base_port + slot ordinal,
# local connection. instance_id and instance_type stay those of the emulated instance.

output "hosts" {
  description = "The module's hosts, sorted by slot, with address 127.0.0.1, port base_port + ordinal and connection local."
  value = [
    for i, h in module.cluster.hosts : merge(h, {
      private_ip = "127.0.0.1"
      public_ip  = "127.0.0.1"
      port       = var.base_port + i
      connection = "local"
      ssh_user   = var.local_user
    })
  ]
}

output "ssh_user" {
  description = "User that runs the local workers."
  value       = var.local_user
}

output "tf_port" {
  description = "Port of the first slot (slot n uses tf_port + n)."
  value       = var.base_port
}

output "cluster_name" {
  description = "Cluster name (tfcluster:cluster tag value)."
  value       = module.cluster.cluster_name
}

output "emulated_hosts" {
  description = "The hosts as the emulator reports them (emulated private IPs), for checks against the endpoint."
  value       = module.cluster.hosts
}
