# A VPC with one public subnet, unless an existing subnet_id is given.

data "aws_subnet" "existing" {
  count = var.subnet_id != null ? 1 : 0
  id    = var.subnet_id
}

resource "aws_vpc" "this" {
  #checkov:skip=CKV2_AWS_11:Flow logs are opt-in through flow_log_destination_arn (an S3 bucket the user owns); a short-lived training VPC does not create its own log bucket.
  count                = var.subnet_id == null ? 1 : 0
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = merge(local.common_tags, { Name = var.cluster_name })
}

# The VPC's default security group allows nothing; hosts use aws_security_group.this.
resource "aws_default_security_group" "this" {
  count  = var.subnet_id == null ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = merge(local.common_tags, { Name = "${var.cluster_name}-default-deny" })
}

resource "aws_flow_log" "this" {
  count                = var.subnet_id == null && var.flow_log_destination_arn != null ? 1 : 0
  vpc_id               = aws_vpc.this[0].id
  traffic_type         = "ALL"
  log_destination_type = "s3"
  log_destination      = var.flow_log_destination_arn
  tags                 = local.common_tags
}

resource "aws_subnet" "this" {
  count                   = var.subnet_id == null ? 1 : 0
  vpc_id                  = aws_vpc.this[0].id
  cidr_block              = cidrsubnet(var.vpc_cidr, 8, 0)
  availability_zone       = local.availability_zone # zones.tf: a zone that offers instance_type
  map_public_ip_on_launch = false
  tags                    = merge(local.common_tags, { Name = "${var.cluster_name}-hosts" })

  lifecycle {
    # The zone is chosen once, at creation. When offerings change later (or availability_zone is edited), a running
    # cluster is not replaced: destroy and provision again to move it.
    ignore_changes = [availability_zone]
  }
}

resource "aws_internet_gateway" "this" {
  count  = var.subnet_id == null ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = merge(local.common_tags, { Name = var.cluster_name })
}

resource "aws_route_table" "this" {
  count  = var.subnet_id == null ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = merge(local.common_tags, { Name = "${var.cluster_name}-public" })
}

resource "aws_route" "internet" {
  count                  = var.subnet_id == null ? 1 : 0
  route_table_id         = aws_route_table.this[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "this" {
  count          = var.subnet_id == null ? 1 : 0
  subnet_id      = aws_subnet.this[0].id
  route_table_id = aws_route_table.this[0].id
}

# SSH only from allowed_ssh_cidrs; the training port (and, on GPU hosts, NCCL's ports) only between members of this
# group. Every configuration creates this group, so it also carries the plan-time checks that span the whole cluster.
resource "aws_security_group" "this" {
  name_prefix = "${var.cluster_name}-"
  description = "tfcluster ${var.cluster_name}: SSH from allowed CIDRs, TensorFlow gRPC within the group"
  vpc_id      = local.vpc_id
  tags        = merge(local.common_tags, { Name = var.cluster_name })

  lifecycle {
    create_before_destroy = true

    precondition {
      condition     = local.zone_problem == null
      error_message = coalesce(local.zone_problem, "-")
    }
    precondition {
      condition     = length(local.user_data) <= local.user_data_limit
      error_message = "The hosts' user data is ${length(local.user_data)} bytes, over EC2's limit of ${local.user_data_limit} (raw, before base64); the boot guard takes ${length(local.boot_guard)} of them. Fix: shorten user_data (install from a script it downloads, e.g. #include https://...)."
    }
  }
}

resource "aws_security_group_rule" "ssh_in" {
  #checkov:skip=CKV_AWS_24:The CIDRs come from var.allowed_ssh_cidrs, whose validation refuses any /0 unless allow_ssh_from_anywhere = true.
  count             = length(var.allowed_ssh_cidrs) > 0 ? 1 : 0
  description       = "SSH from the operators (allowed_ssh_cidrs)"
  type              = "ingress"
  security_group_id = aws_security_group.this.id
  protocol          = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_blocks       = var.allowed_ssh_cidrs
}

resource "aws_security_group_rule" "training_in" {
  description       = "TensorFlow gRPC from cluster members only"
  type              = "ingress"
  security_group_id = aws_security_group.this.id
  protocol          = "tcp"
  from_port         = var.tf_port
  to_port           = var.tf_port
  self              = true
}

resource "aws_security_group_rule" "training_out" {
  description       = "TensorFlow gRPC to cluster members only"
  type              = "egress"
  security_group_id = aws_security_group.this.id
  protocol          = "tcp"
  from_port         = var.tf_port
  to_port           = var.tf_port
  self              = true
}

# NCCL (the all-reduce of GPU jobs) opens its own TCP ports between hosts, beyond tf_port: on GPU hosts the members
# may reach each other on every TCP port. CPU-only clusters keep to tf_port. EFA needs every protocol (its SRD
# traffic is not TCP): with efa = true the same rules admit all traffic between members.
locals {
  member_rule = var.efa ? { protocol = "-1", from_port = 0, to_port = 0, what = "all traffic" } : { protocol = "tcp", from_port = 0, to_port = 65535, what = "all TCP" }
}

resource "aws_security_group_rule" "nccl_in" {
  count             = local.gpus > 0 ? 1 : 0
  description       = "NCCL${var.efa ? "/EFA" : ""}: ${local.member_rule.what} from cluster members (GPU hosts only)"
  type              = "ingress"
  security_group_id = aws_security_group.this.id
  protocol          = local.member_rule.protocol
  from_port         = local.member_rule.from_port
  to_port           = local.member_rule.to_port
  self              = true
}

resource "aws_security_group_rule" "nccl_out" {
  count             = local.gpus > 0 ? 1 : 0
  description       = "NCCL${var.efa ? "/EFA" : ""}: ${local.member_rule.what} to cluster members (GPU hosts only)"
  type              = "egress"
  security_group_id = aws_security_group.this.id
  protocol          = local.member_rule.protocol
  from_port         = local.member_rule.from_port
  to_port           = local.member_rule.to_port
  self              = true
}

resource "aws_security_group_rule" "web_out" {
  for_each          = length(var.egress_cidrs) > 0 ? toset(["80", "443"]) : toset([])
  description       = "HTTP(S) out for packages, S3 and drivers (port ${each.key})"
  type              = "egress"
  security_group_id = aws_security_group.this.id
  protocol          = "tcp"
  from_port         = tonumber(each.key)
  to_port           = tonumber(each.key)
  cidr_blocks       = var.egress_cidrs
}
