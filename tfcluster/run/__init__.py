"""Run: ansible-playbook for a command (``ansible``), its events (``events``) and terminal view (``view``), the
wait decision (``wait``), the failure summary (``failure``), `make status`/`make logs` (``follow``), and how the
control machine reaches a host outside Ansible (``reach``)."""
