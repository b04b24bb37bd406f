"""`python -m ablations.stepbench`: the training step timed alone (`ablations.training.stepbench`)."""

import sys

from ablations.training.stepbench import main

if __name__ == "__main__":
    main(sys.argv[1:])
