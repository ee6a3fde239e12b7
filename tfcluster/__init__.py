"""tfcluster: provision GPU machines, gang-launch multi-worker TensorFlow training, bring the checkpoint home.

Layers (docs/ARCHITECTURE.md), each importing only from the ones below it:

* ``tfcluster.contract`` and ``tfcluster.files`` — the ground floor: every shared name and rule, and the file
  helpers (sha256, atomic write, manifest). Standard library only; they run on the control machine, on every host
  (shipped inside the trainer release) and inside the Ansible modules (as module_utils).
* ``tfcluster.host`` — host-side runtime (job supervisor, job status): standard library only, shipped in the
  release.
* the rest of ``tfcluster`` — the control machine (the ``tfcluster`` command, Terraform, the emulated endpoint,
  the wait loop, the collector).

This file imports nothing: hosts import ``tfcluster.contract`` from a release that holds only the ground floor.
"""
