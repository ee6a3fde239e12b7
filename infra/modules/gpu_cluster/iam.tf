# An instance role for the hosts; with checkpoint_s3 it may read and write only under that bucket prefix.

locals {
  create_profile   = var.iam_instance_profile == null && var.create_instance_profile
  instance_profile = var.iam_instance_profile != null ? var.iam_instance_profile : try(aws_iam_instance_profile.this[0].name, null)
  checkpoint_arn   = var.checkpoint_s3 == null ? null : "arn:aws:s3:::${var.checkpoint_s3.bucket}"
}

resource "aws_iam_role" "this" {
  count       = local.create_profile ? 1 : 0
  name_prefix = "${var.cluster_name}-"
  description = "tfcluster ${var.cluster_name} hosts"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ec2.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
  tags = local.common_tags
}

resource "aws_iam_instance_profile" "this" {
  count       = local.create_profile ? 1 : 0
  name_prefix = "${var.cluster_name}-"
  role        = aws_iam_role.this[0].name
  tags        = local.common_tags
}

resource "aws_iam_role_policy" "checkpoints" {
  count       = local.create_profile && var.checkpoint_s3 != null ? 1 : 0
  name_prefix = "checkpoints-"
  role        = aws_iam_role.this[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "ListCheckpointPrefix"
        Effect    = "Allow"
        Action    = ["s3:ListBucket"]
        Resource  = [local.checkpoint_arn]
        Condition = { StringLike = { "s3:prefix" = ["${var.checkpoint_s3.prefix}/*", var.checkpoint_s3.prefix] } }
      },
      {
        Sid      = "ReadWriteCheckpoints"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
        Resource = ["${local.checkpoint_arn}/${var.checkpoint_s3.prefix}/*"]
      },
    ]
  })
}
