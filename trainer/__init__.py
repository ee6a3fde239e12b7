"""tfcluster's shared training program: ``python -m trainer`` on every host.

Importing this package must stay cheap and TensorFlow-free: the control machine (inventory, plan view, tests)
imports :mod:`tfcluster.core.contract` without TensorFlow installed.
"""
