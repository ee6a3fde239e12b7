"""Provision: the machines, with Terraform. ``python -m tfcluster.provision ACTION --backend local|aws`` runs a
backend (``local``: the emulated endpoint, ``localaws``; ``aws``: AWS, checked by ``awscheck``); ``terraform`` and
``toolchain`` set up Terraform offline (``mirror``); ``known_hosts`` holds each cluster's host keys."""
