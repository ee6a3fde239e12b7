"""Prepare: what the hosts get, built on the control machine: the trainer release and the prepare digest
(``release``), the hash-pinned locks (``lock``) and the air-gapped wheelhouse (``wheelhouse``)."""
