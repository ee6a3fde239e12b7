"""Lookup plugin: a name of the tfcluster contract (tfcluster/core/contract.py), so YAML and Jinja hold no copy."""

from __future__ import annotations

DOCUMENTATION = r"""
name: contract
author: tfcluster (@tfcluster)
short_description: A name of the tfcluster contract
description:
  - Returns a name the parts of tfcluster share (tag keys, model-dir files, exit codes, job states, task types),
    read from C(tfcluster/core/contract.py) on the control machine, so no YAML or Jinja file holds a copy.
  - A dotted term reads into a mapping, for example C(TAG_KEYS.cluster) or C(EXIT_CODES.preempted).
options:
  _terms:
    description: Names of the contract (see C(tfcluster.core.contract.contract_vars)).
    required: true
"""

EXAMPLES = r"""
- name: The completion marker's name
  ansible.builtin.debug:
    msg: "{{ lookup('tfcluster.cluster.contract', 'DONE') }}"
"""

RETURN = r"""
_raw:
  description: The value of each term.
  type: list
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        from tfcluster.core.contract import contract_vars

        names = contract_vars()
        values = []
        for term in terms:
            value: Any = names
            for part in str(term).split("."):
                if not isinstance(value, dict) or part not in value:
                    raise AnsibleLookupError(f"tfcluster.cluster.contract has no name {term!r}; known: "
                                             f"{', '.join(sorted(names))}")
                value = value[part]
            values.append(value)
        return values
