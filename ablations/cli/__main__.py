"""`python -m ablations.cli`: the `vitbench` command."""

import sys

from ablations.cli import main

sys.exit(main())
