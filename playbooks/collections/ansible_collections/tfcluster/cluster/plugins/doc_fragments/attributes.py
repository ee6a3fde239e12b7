"""Documentation shared by the collection's modules: their attributes (check and diff mode), written once
(the community.general ``plugins/doc_fragments/attributes.py`` shape). A module lists
``tfcluster.cluster.attributes`` and one of ``.changes`` (it changes hosts) or ``.info_module`` (read-only)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return a changed status prediction without modifying the target.
  diff_mode:
    description: Returns details on what has changed (or would change in check mode) in diff mode.
"""

    # A module that changes the host: full check mode, a diff of what it changes.
    CHANGES = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

    # A read-only module: it never changes the host, so check mode is the same run and there is no diff.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module never changes the host.
  diff_mode:
    support: none
"""
