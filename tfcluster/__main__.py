"""`python -m tfcluster ...` is the `tfcluster` command."""

from tfcluster.cli import main

raise SystemExit(main())
