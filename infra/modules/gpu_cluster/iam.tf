# One instance role per slot: every host of a cluster runs the same code, so what keeps a worker from overwriting
# the chief's model dir is its own role. With checkpoint_s3 each role may list the prefix and read and write only
# its own task's backups; only the chief's role may also write the model dir. The keys are trainer/s3.py's layout
# below the job prefix the tf_job role gives each job (tf_job_checkpoint_s3 = PREFIX/<job>):
#   PREFIX/<job>/backup/<task>/...  each task's backups (<task> = the slot name: chief-0, worker-1, ...)
#   PREFIX/<job>/model/...          the chief's finished model dir
# An S3 "*" also matches "/": "PREFIX/*/backup/worker-1/*" reaches deeper keys that contain
# "/backup/worker-1/" too (which no reader looks at), so every other role carries an explicit Deny on model/.

locals {
  create_profile = var.iam_instance_profile == null && var.create_instance_profile
  role_slots     = local.create_profile ? local.slots : {}
  # Slot name -> the instance profile its host gets (the given one for every host, or the slot's own).
  instance_profiles = {
    for name in keys(local.slots) : name => var.iam_instance_profile != null ? var.iam_instance_profile : try(aws_iam_instance_profile.this[name].name, null)
  }
  # The chief rule (tfcluster/core/contract.py chief_of): the chief task, else worker 0.
  chief_slot = contains(keys(local.slots), "chief-0") ? "chief-0" : "worker-0"

  checkpoint_arn  = var.checkpoint_s3 == null ? null : "arn:aws:s3:::${var.checkpoint_s3.bucket}"
  checkpoint_kms  = try(var.checkpoint_s3.kms_key_arn, null)
  checkpoint_keys = var.checkpoint_s3 == null ? null : "${local.checkpoint_arn}/${var.checkpoint_s3.prefix}"
  # What each slot's role may read and write. The chief also owns model/ and backup/local-0/ (a one-host job under
  # the mirrored strategy has no TF_CONFIG: the trainer calls its task local:0).
  checkpoint_objects = var.checkpoint_s3 == null ? {} : {
    for name in keys(local.slots) : name => concat(
      ["${local.checkpoint_keys}/*/backup/${name}/*"],
      name == local.chief_slot ? ["${local.checkpoint_keys}/*/model/*", "${local.checkpoint_keys}/*/backup/local-0/*"] : [],
    )
  }
}

resource "aws_iam_role" "this" {
  for_each    = local.role_slots
  name_prefix = "${var.cluster_name}-"
  description = "tfcluster ${var.cluster_name} host ${each.key}"
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
  for_each    = local.role_slots
  name_prefix = "${var.cluster_name}-"
  role        = aws_iam_role.this[each.key].name
  tags        = local.common_tags
}

resource "aws_iam_role_policy" "checkpoints" {
  for_each    = var.checkpoint_s3 == null ? {} : local.role_slots
  name_prefix = "checkpoints-"
  role        = aws_iam_role.this[each.key].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid       = "ListCheckpointPrefix"
        Effect    = "Allow"
        Action    = ["s3:ListBucket"]
        Resource  = [local.checkpoint_arn]
        Condition = { StringLike = { "s3:prefix" = ["${var.checkpoint_s3.prefix}/*", var.checkpoint_s3.prefix] } }
      },
      {
        Sid      = "ReadWriteOwnCheckpoints"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
        Resource = local.checkpoint_objects[each.key]
      },
      ], each.key == local.chief_slot ? [] : [
      {
        Sid      = "NeverTheChiefsModelDir"
        Effect   = "Deny"
        Action   = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
        Resource = ["${local.checkpoint_keys}/*/model/*"]
      },
      ], local.checkpoint_kms == null ? [] : [
      {
        # SSE-KMS: S3 asks KMS for a data key on every upload (and to decrypt on downloads and multipart uploads),
        # in the name of the caller. Only through S3 and only for the checkpoint prefix (or the bucket, which is the
        # context S3 Bucket Keys use); which objects the host may touch stays the S3 statements' business.
        Sid      = "CheckpointKeyThroughS3"
        Effect   = "Allow"
        Action   = ["kms:Decrypt", "kms:GenerateDataKey"]
        Resource = [local.checkpoint_kms]
        Condition = {
          StringLike = {
            "kms:ViaService"                   = "s3.*.amazonaws.com"
            "kms:EncryptionContext:aws:s3:arn" = ["${local.checkpoint_keys}/*", local.checkpoint_arn]
          }
        }
      },
    ])
  })
}

# data_s3: every host may read the dataset prefix (list it, get its objects), nothing else there.
locals {
  data_arn    = var.data_s3 == null ? null : "arn:aws:s3:::${var.data_s3.bucket}"
  data_prefix = try(var.data_s3.prefix, "")
  data_keys   = var.data_s3 == null ? null : (local.data_prefix == "" ? "${local.data_arn}/*" : "${local.data_arn}/${local.data_prefix}/*")
  data_kms    = try(var.data_s3.kms_key_arn, null)
}

resource "aws_iam_role_policy" "data" {
  for_each    = var.data_s3 == null ? {} : local.role_slots
  name_prefix = "data-"
  role        = aws_iam_role.this[each.key].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      merge({
        Sid      = "ListDataPrefix"
        Effect   = "Allow"
        Action   = ["s3:ListBucket"]
        Resource = [local.data_arn]
        }, local.data_prefix == "" ? {} : {
        Condition = { StringLike = { "s3:prefix" = ["${local.data_prefix}/*", local.data_prefix] } }
      }),
      {
        Sid      = "ReadData"
        Effect   = "Allow"
        Action   = ["s3:GetObject"]
        Resource = [local.data_keys]
      },
      ], local.data_kms == null ? [] : [
      {
        Sid      = "DataKeyThroughS3"
        Effect   = "Allow"
        Action   = ["kms:Decrypt"]
        Resource = [local.data_kms]
        Condition = {
          StringLike = {
            "kms:ViaService"                   = "s3.*.amazonaws.com"
            "kms:EncryptionContext:aws:s3:arn" = [local.data_keys, local.data_arn]
          }
        }
      },
    ])
  })
}
