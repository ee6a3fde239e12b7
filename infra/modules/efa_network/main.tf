# EFA-ready networking for gpu_cluster: one EFA network interface per slot in one subnet, in a security group
# that allows all traffic between its members (EFA's requirement) and SSH from allowed_ssh_cidrs.
# Pass `network_interface_ids` to gpu_cluster (same slot names) with subnet_id = this subnet.

resource "aws_security_group" "efa" {
  name_prefix = "${var.cluster_name}-efa-"
  description = "tfcluster ${var.cluster_name}: EFA, all traffic within the group"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { "tfcluster:cluster" = var.cluster_name })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group_rule" "efa_in" {
  description       = "EFA: all traffic from cluster members"
  type              = "ingress"
  security_group_id = aws_security_group.efa.id
  protocol          = "-1"
  from_port         = 0
  to_port           = 0
  self              = true
}

resource "aws_security_group_rule" "efa_out" {
  description       = "EFA: all traffic to cluster members"
  type              = "egress"
  security_group_id = aws_security_group.efa.id
  protocol          = "-1"
  from_port         = 0
  to_port           = 0
  self              = true
}

resource "aws_security_group_rule" "ssh_in" {
  #checkov:skip=CKV_AWS_24:The CIDRs come from var.allowed_ssh_cidrs, whose validation refuses any /0.
  count             = length(var.allowed_ssh_cidrs) > 0 ? 1 : 0
  description       = "SSH from the operators (allowed_ssh_cidrs)"
  type              = "ingress"
  security_group_id = aws_security_group.efa.id
  protocol          = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_blocks       = var.allowed_ssh_cidrs
}

resource "aws_security_group_rule" "https_out" {
  description       = "HTTPS out for packages, S3 and drivers"
  type              = "egress"
  security_group_id = aws_security_group.efa.id
  protocol          = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_blocks       = var.egress_cidrs
}

resource "aws_network_interface" "efa" {
  for_each        = toset(var.slot_names)
  subnet_id       = var.subnet_id
  security_groups = [aws_security_group.efa.id]
  interface_type  = "efa"
  description     = "${var.cluster_name} ${each.key} EFA"
  tags            = merge(var.tags, { "tfcluster:cluster" = var.cluster_name, Name = "${var.cluster_name}-${each.key}-efa" })
}
