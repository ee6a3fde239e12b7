#!/usr/bin/python
"""tfcluster.cluster.manifest_info: read a finished model dir's manifest and sizes, as the job's user."""

from __future__ import annotations

DOCUMENTATION = r"""
module: manifest_info
short_description: Read a finished model dir's manifest and the sizes of the files it lists
description:
  - Run it on the chief as the job's user (C(become_user)), never as root.
  - Opens the model dir, C(MANIFEST.sha256) and every listed path component by component with C(O_NOFOLLOW);
    a symlink anywhere below the model dir is refused, not followed. Sizes come from C(lstat) (regular files only).
  - An error names the path and why, never a line of the file.
  - Every listed and optional name must be a plain path inside the model dir (relative, no C(..), no empty or
    C(.) component, no backslash, no control character); a manifest line or an optional name that is not is refused.
  - Read-only; C(done) is false (and nothing else is read) while C(DONE) is missing.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  path:
    description: The model dir.
    type: path
    required: true
  optional:
    description: Names reported too when they are regular files (status.json, metrics.json, ...); each a plain path
      relative to the model dir.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.info_module
"""

EXAMPLES = r"""
- name: Read the manifest as the job's user
  tfcluster.cluster.manifest_info:
    path: /var/lib/tfcluster/mnist
    optional: [status.json, metrics.json]
  become: true
  become_user: tfcluster
  register: model
"""

RETURN = r"""
done:
  description: The completion marker is there.
  returned: always
  type: bool
manifest:
  description: The manifest's text.
  returned: always
  type: str
manifest_sha256:
  description: Its sha256 (the version of a collected copy).
  returned: always
  type: str
files:
  description: "C([{path, sha256, size}]) of every listed file, then the manifest and DONE (sha256 null)."
  returned: always
  type: list
optional:
  description: "C([{path, size}]) of the optional names that are regular files."
  returned: always
  type: list
problems:
  description: Listed paths that are missing, not regular files, or reached through a symlink.
  returned: always
  type: list
total_bytes:
  description: The sum of the sizes.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.modeldir import ModelDirError, describe


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True},
                                          "optional": {"type": "list", "elements": "str", "default": []}},
                           supports_check_mode=True)
    try:
        found = describe(module.params["path"], module.params["optional"])
    except ModelDirError as error:
        module.fail_json(msg=str(error))
    if found["problems"]:
        module.fail_json(msg=f"{module.params['path']}: " + "; ".join(found["problems"][:10]), **found)
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
