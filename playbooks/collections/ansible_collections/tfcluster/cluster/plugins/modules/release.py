#!/usr/bin/python
"""tfcluster.cluster.release: check a deployed trainer release by its content digest and make it current."""

from __future__ import annotations

DOCUMENTATION = r"""
module: release
short_description: Check a deployed trainer release by its digest and point C(current) at it atomically
description:
  - A release lives in C(ROOT/releases/DIGEST/), where DIGEST is the sha256 tree digest of its files
    (C(tfcluster.core.files.tree_digest), the digest the control machine staged it under,
    C(python -m tfcluster.prepare.release)).
  - The module recomputes the digest of that directory on the host and fails, naming the host's path, when it
    differs (a partial unpack or a changed file).
  - With I(state=current) it then points C(ROOT/current) at C(releases/DIGEST) by renaming a temporary symlink over
    it, so a reader sees the old or the new release, never none.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  root:
    description: The install directory (holds C(releases/) and C(current)).
    type: path
    required: true
  digest:
    description: The release's digest (64 hex digits).
    type: str
    required: true
  state:
    description: C(verified) checks only; C(current) also points C(current) at the release.
    type: str
    choices: [current, verified]
    default: current
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.changes
"""

EXAMPLES = r"""
- name: Make the release current
  tfcluster.cluster.release:
    root: /opt/tfcluster/trainer
    digest: "{{ trainer_digest }}"
"""

RETURN = r"""
digest:
  description: The digest recomputed on the host.
  returned: success
  type: str
current:
  description: Where C(current) points after the run.
  returned: always
  type: str
"""

import os
import re
import secrets

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.core.files import tree_digest


def current_target(link: str) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return ""


def swap_link(link: str, target: str) -> None:
    """Point ``link`` at ``target``: a temporary symlink renamed over it (atomic)."""
    directory = os.path.dirname(link)
    tmp = os.path.join(directory, f".current-{os.getpid()}-{secrets.token_hex(4)}")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        os.unlink(tmp)
        raise


def main() -> None:
    module = AnsibleModule(argument_spec={
        "root": {"type": "path", "required": True},
        "digest": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["current", "verified"], "default": "current"},
    }, supports_check_mode=True)
    root, digest, state = module.params["root"], module.params["digest"], module.params["state"]
    link = os.path.join(root, "current")
    before = current_target(link)
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        module.fail_json(msg=f"release: digest {digest!r} is not 64 hex digits", current=before)
    release = os.path.join(root, "releases", digest)
    if not os.path.isdir(release) or os.path.islink(release):
        module.fail_json(msg=f"release {release} is not on the host. Fix: re-run site.yml (tag trainer)",
                         current=before)
    found = tree_digest(release)
    if found != digest:
        module.fail_json(msg=f"release {release} has digest {found}, not {digest}: a partial unpack or a changed "
                         "file. Fix: remove the directory and re-run site.yml (tag trainer)", current=before)
    want = f"releases/{digest}"
    changed = state == "current" and before != want
    if changed and not module.check_mode:
        swap_link(link, want)
    module.exit_json(changed=changed, digest=found, current=want if changed or before == want else before,
                     diff={"before": f"current -> {before}\n", "after": f"current -> {want if changed else before}\n"})


if __name__ == "__main__":
    main()
