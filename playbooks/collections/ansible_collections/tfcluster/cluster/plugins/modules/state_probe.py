#!/usr/bin/python
"""tfcluster.cluster.state_probe: compare a host with the state a role wants, read-only."""

from __future__ import annotations

DOCUMENTATION = r"""
module: state_probe
short_description: Compare a host with the state a role wants, in one read-only pass
description:
  - Checks paths (type, mode, owner, group, sha256 or text content, link target), Debian packages, groups, users
    and a virtualenv's modules in one module run, and reports each difference.
  - The prepare roles run it once per host when the prepare digest differs (the host_ready role), and run their
    modules only for a section that shows a difference. It never changes anything.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  spec:
    description:
      - "C({SECTION: {paths, packages, groups, users, venv, imports}}): see the module_utils C(probe) docstring."
    type: dict
    required: true
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.info_module
"""

EXAMPLES = r"""
- name: Probe the runtime
  tfcluster.cluster.state_probe:
    spec:
      runtime:
        paths: {/opt/tfcluster/venv/bin/python: {type: exists}}
        packages: [python3-venv]
        venv: /opt/tfcluster/venv
        imports: [tensorflow]
  register: probe
"""

RETURN = r"""
state:
  description: "C({SECTION: {drift: {WHAT: WHY}, missing: [MODULE] or null}}); an empty drift: in place."
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.probe import probe


def main() -> None:
    module = AnsibleModule(argument_spec={"spec": {"type": "dict", "required": True}}, supports_check_mode=True)
    sections = module.params["spec"]
    bad = sorted(name for name, section in sections.items() if not isinstance(section, dict))
    if bad:
        module.fail_json(msg=f"state_probe: section(s) {', '.join(bad)} must be mappings")
    module.exit_json(changed=False, state=probe(sections))


if __name__ == "__main__":
    main()
