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

output "connect" {
  description = "How the control machine reaches the hosts: public (hosts[].public_ip), private (hosts[].private_ip) or bastion (hosts[].private_ip through the bastion output)."
  value       = var.connect
}

output "bastion" {
  description = "The jump host { address, user, port } when connect = \"bastion\"; null otherwise."
  value       = var.connect == "bastion" ? var.bastion : null
}

output "ssh_user" {
  description = "Login user of the hosts."
  value       = var.ssh_user
}

output "tf_port" {
  description = "TensorFlow gRPC port every task listens on."
  value       = var.tf_port
}

output "gpus" {
  description = "NVIDIA GPUs per host (the same number as hosts[].gpus and the tfcluster:gpus tag)."
  value       = local.gpus
}

output "gpu_vendor" {
  description = "GPU vendor of instance_type: nvidia, amd (g4ad: gpus is 0, no NVIDIA driver or NCCL) or none."
  value       = local.gpu_vendor
}

output "cluster_name" {
  description = "Cluster name (value of the tfcluster:cluster tag)."
  value       = var.cluster_name
}

output "tag_keys" {
  description = "Tag keys the module writes on every instance: cluster, task_type, task_index, port, gpus, ssh_user, expires."
  value       = local.tag_keys
}

output "autostop_down" {
  description = "What a host that powers itself off becomes: stop or terminate (its instance_initiated_shutdown_behavior)."
  value       = var.autostop_down
}

output "expires_at" {
  description = "The tfcluster:expires tag value (RFC 3339 UTC), or null."
  value       = var.expires_at
}

output "checkpoint_s3" {
  description = "s3://BUCKET/PREFIX the hosts may read and write checkpoints under, or null."
  value       = var.checkpoint_s3 == null ? null : "s3://${var.checkpoint_s3.bucket}/${var.checkpoint_s3.prefix}"
}

output "availability_zone" {
  description = "Availability zone of the hosts (asked for, of the existing subnet, or the first that offered instance_type when the subnet was created)."
  value       = local.host_zone
}

output "offering_zones" {
  description = "Availability zones of the region that offer instance_type, sorted."
  value       = local.offering_zones
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
  description = "AMI this cluster keeps (decided at the first apply from ami_id or the newest lookup): what new hosts launch with."
  value       = local.ami_id
}

output "ami_in_use" {
  description = "AMIs the launched hosts run, sorted, without repeats (empty before they exist; the hosts ignore later AMI changes)."
  value       = sort(distinct(concat([for i in aws_instance.this : i.ami], [for r in aws_spot_instance_request.this : r.ami])))
}

output "ami_latest" {
  description = "The newest image the lookup finds now, { id, name, creation_date }: when its id is not in ami_in_use, a newer image exists (AMI=refresh moves every host to it). null when ami_id pins the AMI."
  value       = try({ id = data.aws_ami.deep_learning[0].id, name = data.aws_ami.deep_learning[0].name, creation_date = data.aws_ami.deep_learning[0].creation_date }, null)
}

output "ami_lookup" {
  description = "The AMI lookup used when ami_id is null: { name, architecture, owners }; null when ami_id is given."
  value       = var.ami_id == null ? { name = local.ami_name_filter, architecture = local.architecture, owners = var.ami_owners } : null
}

output "placement_group" {
  description = "Name of the cluster placement group, or null."
  value       = try(aws_placement_group.this[0].name, null)
}

output "instance_profiles" {
  description = "Slot name -> the instance profile attached to that host (one per slot, or the given iam_instance_profile for every host; null without one)."
  value       = local.instance_profiles
}

output "instance_store" {
  description = "The instance type's local NVMe instance store: { supported, total_gb, disks = [{ count, size_gb, type }], mount }. The Deep Learning AMI mounts it at mount (/opt/dlami/nvme); it is wiped when the host stops or terminates, so it suits datasets (staged again) and scratch, not the only copy of backups."
  value = {
    supported = data.aws_ec2_instance_type.this.instance_storage_supported
    total_gb  = data.aws_ec2_instance_type.this.total_instance_storage
    disks     = [for d in data.aws_ec2_instance_type.this.instance_disks : { count = d.count, size_gb = d.size, type = d.type }]
    mount     = data.aws_ec2_instance_type.this.instance_storage_supported ? "/opt/dlami/nvme" : null
  }
}

output "autostop" {
  description = "The boot guard each host gets in its user data: { guard (idle time or expiry set), settings (/etc/tfcluster/autostop.json: the autostop role's keys plus expires_at) }."
  value       = { guard = local.autostop_guard, settings = local.autostop_settings }
}

output "launch" {
  description = "What a root needs to launch the hosts itself (launch_instances = false): ami_id, instance_type, key_name, subnet_id, security_group_ids, placement_group, iam_instance_profiles (slot name -> profile), user_data (with the boot guard), shutdown_behavior, monitoring, metadata_hop_limit, root_volume { size, kms_key_id, throughput, iops }, capacity { preference, reservation_id, capacity_block } and slot_tags (slot name -> tags)."
  value = {
    ami_id                = local.ami_id
    instance_type         = var.instance_type
    key_name              = local.key_name
    subnet_id             = local.subnet_id
    security_group_ids    = [aws_security_group.this.id]
    placement_group       = local.placement
    iam_instance_profiles = local.instance_profiles
    user_data             = local.user_data
    shutdown_behavior     = var.autostop_down
    monitoring            = var.monitoring
    metadata_hop_limit    = var.metadata_hop_limit
    root_volume           = { size = var.root_volume_size, kms_key_id = var.root_volume_kms_key_id, throughput = var.root_volume_throughput, iops = var.root_volume_iops }
    capacity              = var.capacity
    slot_tags             = local.slot_tags
  }
}

output "spot" {
  description = "Whether the hosts are one-time spot instances (make train then replaces a lost one and resumes by default: RECOVER=1)."
  value       = var.spot.enabled
}
