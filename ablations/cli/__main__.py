"""`python -m ablations.cli`: the `vitbench` command."""

from ablations.cli import run

run()
