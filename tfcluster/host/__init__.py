"""The host-side runtime of a job: standard library only, runs on every host's system Python (3.10 or newer).

Shipped to each host inside the trainer release (``PYTHONPATH=<release> python3 -m tfcluster.host.<name>``) and to
Ansible modules as the ``tfcluster.cluster`` collection's ``module_utils/host`` (a link to this folder; its
neighbour ``module_utils/core`` links ``tfcluster/core``, so the relative imports work in both places):

* ``jobspec``    the job spec the tf_job role renders, its paths, states and small (capped, no-follow) readers;
* ``supervisor`` the process backend (hosts without systemd, local slots): start, supervise, stop, finalize;
* ``netns``      the local slots' private network namespace (holder, nsenter);
* ``jobhome``    each job's writable home and caches (HOME, XDG_CACHE_HOME, KERAS_HOME, ...), made as the job user;
* ``jobstatus``  a task's status for both backends and its log (``status`` / ``logs`` command line);
* ``preflight``  checks before anything starts: port free, runtime imports, release digest, files, GPUs;
* ``autostop``   the idle check behind the tfcluster.autostop timer;
* ``drivers``    the NVIDIA driver decisions of the nvidia_driver role (pure functions).

Imports only ``tfcluster.core`` (relatively). This file imports nothing.
"""
