"""Collect: the chief's model dir onto this machine, verified, bounded and versioned (``store``), over SSH
(``ssh``, ``transfer``) or from S3 (``s3``); the ledger of what finished and what came home (``ledger``).
``python -m tfcluster.collect`` is the collector role's command."""
