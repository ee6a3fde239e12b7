# What the inventory (hosts, connect, bastion, ssh_user, tf_port, cluster_name) and the CLI (region, checkpoint_s3,
# autostop_down, expires_at; offering_zones for zone failover; ami_in_use, ami_latest for `make plan`'s image line)
# read. Same names and shapes in infra/local and infra/examples/efa.

output "hosts" {
  description = "Hosts sorted by slot (the inventory's terraform source reads this)."
  value       = module.cluster.hosts
}

output "connect" {
  description = "How the hosts are reached: public, private or bastion."
  value       = module.cluster.connect
}

output "bastion" {
  description = "The jump host { address, user, port } for connect = bastion, else null."
  value       = module.cluster.bastion
}

output "ssh_user" {
  description = "Login user of the hosts."
  value       = module.cluster.ssh_user
}

output "tf_port" {
  description = "TensorFlow gRPC port."
  value       = module.cluster.tf_port
}

output "cluster_name" {
  description = "Cluster name (tfcluster:cluster tag value)."
  value       = module.cluster.cluster_name
}

output "region" {
  description = "AWS region of the cluster."
  value       = var.region
}

output "availability_zone" {
  description = "Availability zone of the hosts."
  value       = module.cluster.availability_zone
}

output "gpu_vendor" {
  description = "GPU vendor of the instance type: nvidia, amd or none."
  value       = module.cluster.gpu_vendor
}

output "checkpoint_s3" {
  description = "s3://BUCKET/PREFIX for checkpoints, or null."
  value       = module.cluster.checkpoint_s3
}

output "autostop_down" {
  description = "What a host that powers itself off becomes: stop or terminate."
  value       = module.cluster.autostop_down
}

output "expires_at" {
  description = "The tfcluster:expires tag value, or null."
  value       = module.cluster.expires_at
}

output "offering_zones" {
  description = "Zones of the region that offer the instance type, sorted (zone failover: the next one to try)."
  value       = module.cluster.offering_zones
}

output "ami_in_use" {
  description = "AMIs the hosts run, sorted, without repeats."
  value       = module.cluster.ami_in_use
}

output "ami_latest" {
  description = "The newest image the lookup finds now { id, name, creation_date }, or null when ami_id pins it."
  value       = module.cluster.ami_latest
}

output "instance_store" {
  description = "The instance type's NVMe instance store { supported, total_gb, disks, mount }."
  value       = module.cluster.instance_store
}

output "autostop" {
  description = "The boot guard in the hosts' user data { guard, settings }."
  value       = module.cluster.autostop
}

output "spot" {
  description = "Whether the hosts are one-time spot instances (make train then replaces a lost one and resumes by default: RECOVER=1)."
  value       = module.cluster.spot
}
