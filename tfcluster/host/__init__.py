"""The host-side runtime of a job: standard library only, runs on every host's system Python (3.10 or newer).

Shipped to each host inside the trainer release (``PYTHONPATH=<release> python3 -m tfcluster.host.<name>``) and
to Ansible modules as the ``tfcluster.cluster`` collection's module_utils (links to these files):

* ``jobspec``    the job spec the tf_job role renders, its paths, states and small readers;
* ``supervisor`` the process backend (hosts without systemd, local slots): start, supervise, stop, finalize;
* ``jobstatus``  a task's status for both backends and its log (``status`` / ``logs`` command line);
* ``preflight``  checks before anything starts: port free, runtime imports, release digest, files, GPUs.

This file imports nothing.
"""
