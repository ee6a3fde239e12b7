"""tfcluster's dynamic Ansible inventory: every host gets a stable TensorFlow task type and index.

The entry point is ``inventory/slots.py``; see its docstring (or inventory/README.md) for usage.
"""
