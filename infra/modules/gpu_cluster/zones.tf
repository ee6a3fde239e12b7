# The availability zone of the hosts: one that offers instance_type. Not every zone offers every GPU type (g5.xlarge
# in us-east-1: 1a 1b 1c 1d 1f, not 1e), and an apply in the wrong one fails after the network exists.
# One DescribeInstanceTypeOfferings per zone (location + instance-type filters): the `locations` attribute that would
# answer in one call does not exist in hashicorp/aws 3.39, the oldest provider the module supports.

data "aws_availability_zones" "this" {
  #checkov:skip=CKV_AWS_394:The list only chooses the subnet's zone at creation; the subnet ignores later changes (lifecycle.ignore_changes), so a zone AWS adds never moves the cluster.
  state = "available"
}

data "aws_ec2_instance_type_offerings" "zone" {
  for_each      = toset(data.aws_availability_zones.this.names)
  location_type = "availability-zone"

  filter {
    name   = "location"
    values = [each.key]
  }
  filter {
    name   = "instance-type"
    values = [var.instance_type]
  }
}

locals {
  offering_zones = sort([for zone, offer in data.aws_ec2_instance_type_offerings.zone : zone if length(offer.instance_types) > 0])
  # The zone asked for (availability_zone, or the zone of an existing subnet_id), else the first zone that offers it.
  wanted_zone       = var.subnet_id != null ? try(data.aws_subnet.existing[0].availability_zone, null) : var.availability_zone
  availability_zone = local.wanted_zone != null ? local.wanted_zone : try(local.offering_zones[0], null)
  # Where the hosts are: the created subnet keeps the zone it was created in (see its ignore_changes).
  host_zone = var.subnet_id != null ? local.wanted_zone : aws_subnet.this[0].availability_zone
  zone_problem = (
    length(local.offering_zones) == 0
    ? "No availability zone of this region offers ${var.instance_type}. Fix: choose another region (region) or another instance_type."
    : contains(local.offering_zones, local.availability_zone) ? null
    : "${var.instance_type} is not offered in ${local.availability_zone}${var.subnet_id != null ? " (the zone of subnet_id ${var.subnet_id})" : ""}. Zones that offer it: ${join(", ", local.offering_zones)}. Fix: ${var.subnet_id != null ? "use a subnet in one of them" : "set availability_zone to one of them, or leave it null to pick the first"}."
  )
}
