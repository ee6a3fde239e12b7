"""The ground floor, standard library only, shipped to every host: ``contract`` (every shared name and rule),
``files`` (sha256, atomic writes, manifests), ``duration``, ``text`` (host text for a terminal), ``addresses`` and
``sshkeys`` (what names a host), ``paths`` (where things live in a checkout). Imports nothing above it."""
