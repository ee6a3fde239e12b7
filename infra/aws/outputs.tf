output "hosts" {
  description = "Hosts sorted by slot (the inventory's terraform source reads this)."
  value       = module.cluster.hosts
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
