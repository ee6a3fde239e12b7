"""tfcluster: provision GPU machines, gang-launch multi-worker TensorFlow training, bring the checkpoint home.

The package is laid out by stage, and every import points down (docs/ARCHITECTURE.md, "Layers"; the floor plan is
checked by tests/unit/test_layers.py):

* ``cli``        the `tfcluster` command (`make train` is `tfcluster train`) and its settings;
* ``kinds``      one module per cluster kind (local, aws, onprem) behind one interface, routed in one table;
* ``collect``    bring the chief's model dir home: store, SSH and S3 pulls, transfer, ledger;
* ``run``        run the playbooks and watch the job: ansible runner, events, view, wait decision, follow;
* ``prepare``    what the hosts get: the release, the locks, the wheelhouse;
* ``provision``  the machines: Terraform toolchain, the emulated endpoint, AWS checks, host keys at provision;
* ``inventory``  hosts and slots into an Ansible inventory (the entry point is inventory/slots.py);
* ``cost``       clusters in a region and what they cost;
* ``host``       the host runtime (shipped to every host): job supervisor, status, preflight, autostop;
* ``core``       the ground floor (shipped): the contract, file helpers, durations, text, addresses, SSH keys.

This file imports nothing: hosts import ``tfcluster.core`` and ``tfcluster.host`` from a release that holds only
those.
"""
