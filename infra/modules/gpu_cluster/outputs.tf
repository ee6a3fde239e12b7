output "hosts" {
  description = "One object per slot, sorted by slot (chief, ps, worker, evaluator, then index): name, task_type, task_index, instance_id, private_ip, public_ip, instance_type, port, gpus, connection, ssh_user. The inventory's terraform source reads this."
  value = [
    for s in local.slot_list : {
      name          = s.name
      task_type     = s.task_type
      task_index    = s.task_index
      instance_id   = try(local.instances[s.name].id, null)
      private_ip    = try(local.instances[s.name].private_ip, null)
      public_ip     = try(local.instances[s.name].public_ip, null)
      instance_type = var.instance_type
      port          = var.tf_port
      gpus          = local.gpus
      connection    = "ssh"
      ssh_user      = var.ssh_user
    }
  ]
}

output "ssh_user" {
  description = "Login user of the hosts."
  value       = var.ssh_user
}

output "tf_port" {
  description = "TensorFlow gRPC port every task listens on."
  value       = var.tf_port
}

output "cluster_name" {
  description = "Cluster name (value of the tfcluster:cluster tag)."
  value       = var.cluster_name
}

output "tag_keys" {
  description = "Tag keys the module writes on every instance: cluster, task_type, task_index."
  value       = local.tag_keys
}

output "security_group_id" {
  description = "Security group of the hosts."
  value       = aws_security_group.this.id
}

output "vpc_id" {
  description = "VPC of the hosts (created or the existing subnet's)."
  value       = local.vpc_id
}

output "subnet_id" {
  description = "Subnet of the hosts (created or given)."
  value       = local.subnet_id
}

output "ami_id" {
  description = "AMI the hosts run (given or looked up)."
  value       = local.ami_id
}

output "placement_group" {
  description = "Name of the cluster placement group, or null."
  value       = try(aws_placement_group.this[0].name, null)
}

output "instance_profile" {
  description = "Instance profile attached to the hosts, or null."
  value       = local.instance_profile
}
