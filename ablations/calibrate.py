"""`python -m ablations.calibrate`: the report's test against known answers (`ablations.analysis.calibrate`)."""

import sys

from ablations.analysis.calibrate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
