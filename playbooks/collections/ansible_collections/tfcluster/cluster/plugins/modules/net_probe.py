#!/usr/bin/python
"""tfcluster.cluster.net_probe: measure this host's link to the next host of the ring, on the training port."""

from __future__ import annotations

DOCUMENTATION = r"""
module: net_probe
short_description: Measure this host's link to its peer before a job starts (the ring network check)
description:
  - Listens on this host's training port (free before the gang start) for the previous host of the ring while it
    sends to the next one for C(seconds); the rate is what the receiver counted (tfcluster/host/netcheck.py).
  - Every host of the job runs it at the same time (one task of the play); the control side reports each link and
    names the slow ones (tfcluster/run/netcheck.py). It changes nothing on the host.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  port:
    description: The port this host listens on (its training port).
    type: int
    required: true
  peer_host:
    description: The next host of the ring, as the job reaches it (its TF_CONFIG address).
    type: str
    required: true
  peer_port:
    description: The next host's training port.
    type: int
    required: true
  seconds:
    description: How long this host sends.
    type: float
    default: 2.0
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.info_module
"""

EXAMPLES = r"""
- name: Measure the link to the next host
  tfcluster.cluster.net_probe:
    port: 2222
    peer_host: 10.0.0.12
    peer_port: 2222
  register: probe
"""

RETURN = r"""
link:
  description: "C({to, mbit_s, sent, received, seconds}), or C({to, error}); C(listener): what this host's own
    listener counted."
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.netcheck import probe


def main() -> None:
    module = AnsibleModule(argument_spec={"port": {"type": "int", "required": True},
                                          "peer_host": {"type": "str", "required": True},
                                          "peer_port": {"type": "int", "required": True},
                                          "seconds": {"type": "float", "default": 2.0}},
                           supports_check_mode=True)
    if module.check_mode:
        module.exit_json(changed=False, link={"to": f"{module.params['peer_host']}:{module.params['peer_port']}",
                                              "error": "not measured in check mode"})
    params = module.params
    try:
        link = probe(params["port"], params["peer_host"], params["peer_port"], params["seconds"])
    except OSError as error:  # this host's own port could not be bound
        module.fail_json(msg=f"cannot listen on port {params['port']} for the network check: {error}. Fix: free the "
                             "port (another job?), or NETCHECK=off")
    module.exit_json(changed=False, link=link)


if __name__ == "__main__":
    main()
