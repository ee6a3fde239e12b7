"""Cost: every tfcluster cluster of a region from its EC2 tags (``clusters``) and an estimate of what it costs
per hour (``prices``)."""
