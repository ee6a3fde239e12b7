"""A small, dated table of EC2 on-demand prices, for the cost estimates of `make clusters` and `make train`.

An ESTIMATE: Linux on-demand list prices in USD per instance-hour for one region, as published by AWS on the date
below. Not included: EBS volumes (gp3 ~$0.08 per GB-month: the default 200 GB root volume adds ~$0.02 per
instance-hour, also while stopped), data transfer, spot or Savings Plans discounts, taxes. Other regions cost
roughly 0.9x-1.3x. Refresh it with ``aws pricing get-products --service-code AmazonEC2 ...`` or the AWS price list
and change AS_OF with it.
"""

from __future__ import annotations

from dataclasses import dataclass

AS_OF = "2025-05-31"
REGION = "us-east-1"
CURRENCY = "USD"

# instance type -> USD per hour, on demand, Linux, REGION, AS_OF.
ON_DEMAND: dict[str, float] = {
    # NVIDIA T4
    "g4dn.xlarge": 0.526, "g4dn.2xlarge": 0.752, "g4dn.4xlarge": 1.204, "g4dn.8xlarge": 2.176,
    "g4dn.12xlarge": 3.912, "g4dn.16xlarge": 4.352, "g4dn.metal": 7.824,
    # NVIDIA A10G (g5.xlarge: the default and the demo's type)
    "g5.xlarge": 1.006, "g5.2xlarge": 1.212, "g5.4xlarge": 1.624, "g5.8xlarge": 2.448, "g5.12xlarge": 5.672,
    "g5.16xlarge": 4.096, "g5.24xlarge": 8.144, "g5.48xlarge": 16.288,
    # NVIDIA L4
    "g6.xlarge": 0.8048, "g6.2xlarge": 0.9776, "g6.4xlarge": 1.3232, "g6.8xlarge": 2.0144,
    "g6.12xlarge": 4.6016, "g6.16xlarge": 3.3968, "g6.24xlarge": 6.6752, "g6.48xlarge": 13.3504,
    # NVIDIA V100, A100, H100 (AWS cut P4d and P5 on-demand prices by up to 45% in June 2025, after AS_OF: read
    # these two as an upper bound)
    "p3.2xlarge": 3.06, "p3.8xlarge": 12.24, "p3.16xlarge": 24.48,
    "p4d.24xlarge": 32.7726, "p5.48xlarge": 98.32,
    # AMD and Graviton GPU types
    "g4ad.xlarge": 0.3785, "g5g.xlarge": 0.42,
}


@dataclass(frozen=True)
class Estimate:
    """Cost per hour of some instances: ``per_hour`` over the priced ones, and the types the table lacks."""

    per_hour: float
    unpriced: tuple[str, ...] = ()

    def text(self) -> str:
        if not self.per_hour and self.unpriced:
            return "?"
        more = f" + {', '.join(self.unpriced)} (no price)" if self.unpriced else ""
        return f"${self.per_hour:,.2f}{more}"


def price(instance_type: str) -> float | None:
    """USD per hour of one instance of this type, or None when the table does not have it."""
    return ON_DEMAND.get(instance_type)


def estimate(instance_types: list[str]) -> Estimate:
    """Cost per hour of running one instance of each listed type (list a type twice for two instances)."""
    priced = [p for p in map(price, instance_types) if p is not None]
    unpriced = tuple(sorted({t for t in instance_types if price(t) is None}))
    return Estimate(per_hour=round(sum(priced), 4), unpriced=unpriced)


def note(region: str | None = None) -> str:
    """The line every cost figure comes with."""
    where = f"; this cluster is in {region}, prices there differ" if region and region != REGION else ""
    return (f"Cost: estimate from on-demand {REGION} list prices of {AS_OF} (tfcluster/cost/prices.py); instances "
            f"only, EBS and data transfer not included{where}.")
