"""`python -m ablations COMMAND`: the command line is `ablations.cli.parser`."""

from ablations.cli.parser import main
from bench.loading import end_process

if __name__ == "__main__":
    end_process(main())
