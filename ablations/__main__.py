"""`python -m ablations COMMAND`: the command line is `ablations.cli.parser`."""

import sys

from ablations.cli.parser import main

if __name__ == "__main__":
    sys.exit(main())
