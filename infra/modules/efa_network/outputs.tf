output "network_interface_ids" {
  description = "Slot name -> EFA network interface id; pass to gpu_cluster's network_interface_ids."
  value       = { for k, eni in aws_network_interface.efa : k => eni.id }
}

output "security_group_id" {
  description = "The EFA security group."
  value       = aws_security_group.efa.id
}
