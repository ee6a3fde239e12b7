# Same names and shapes as infra/aws; every slot is served from this machine: 127.0.0.1, base_port + slot ordinal,
# local connection, 0 declared GPUs (the emulated instance type's GPUs are not on this machine: a local slot uses
# whatever this machine has, and the job's preflight asserts nothing). instance_id and instance_type stay those of
# the emulated instance.

output "hosts" {
  description = "The module's hosts, sorted by slot, with address 127.0.0.1, port base_port + ordinal, connection local and 0 GPUs."
  value = [
    for i, h in module.cluster.hosts : merge(h, {
      private_ip = "127.0.0.1"
      public_ip  = "127.0.0.1"
      port       = var.base_port + i
      connection = "local"
      ssh_user   = var.local_user
      gpus       = 0
    })
  ]
}

output "connect" {
  description = "How the hosts are reached (public: hosts[].public_ip, which is 127.0.0.1 here)."
  value       = module.cluster.connect
}

output "bastion" {
  description = "Always null here."
  value       = module.cluster.bastion
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

output "region" {
  description = "Region of the emulated endpoint."
  value       = local.region
}

output "availability_zone" {
  description = "Emulated availability zone of the hosts (one that offers instance_type in moto's data)."
  value       = module.cluster.availability_zone
}

output "gpu_vendor" {
  description = "GPU vendor of the emulated instance type."
  value       = module.cluster.gpu_vendor
}

output "checkpoint_s3" {
  description = "Always null here (no checkpoint bucket)."
  value       = module.cluster.checkpoint_s3
}

output "autostop_down" {
  description = "Shutdown behaviour of the emulated instances (autostop does not apply to local slots)."
  value       = module.cluster.autostop_down
}

output "expires_at" {
  description = "The tfcluster:expires tag value of the emulated instances, or null."
  value       = module.cluster.expires_at
}

output "emulated_hosts" {
  description = "The hosts as the emulator reports them (emulated private IPs), for checks against the endpoint."
  value       = module.cluster.hosts
}

output "offering_zones" {
  description = "Zones of the emulated region that offer the instance type, sorted."
  value       = module.cluster.offering_zones
}

output "ami_in_use" {
  description = "AMIs the emulated instances run (the fixed image moto ships)."
  value       = module.cluster.ami_in_use
}

output "ami_latest" {
  description = "Always null here (the AMI is pinned: no lookup in the emulator)."
  value       = module.cluster.ami_latest
}

output "instance_store" {
  description = "The emulated instance type's NVMe instance store (moto's instance type data)."
  value       = module.cluster.instance_store
}

output "autostop" {
  description = "The boot guard in the emulated instances' user data (it never runs: local slots are processes here)."
  value       = module.cluster.autostop
}
