"""The `tfcluster` command (``main``): settings from the Make variables, one function per command (``commands``),
the run of one command (``command``), the locks, and the end-of-job summary."""
