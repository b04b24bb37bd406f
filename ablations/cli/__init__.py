"""`vitbench`: one command for the project's programs (installed by `pip install .`).

    vitbench sweep default --seeds 0        # python -m ablations sweep …  (also train, report, compare,
                                            #   predict, cost, migrate, columns, known, calibrate, stepbench)
    vitbench bench run --preset vit_mnist   # python -m bench run …  (also convert-json, peak)

Like the `python -m` forms it wraps, `--help` and a refused argument load no torch.
"""

from __future__ import annotations

import sys
from typing import NoReturn

USAGE = """usage: vitbench COMMAND [ARGS]

  sweep, train, report, compare, predict, cost, migrate, columns, known, calibrate, stepbench
                                                    as python -m ablations COMMAND (vitbench sweep --help)
  bench run | convert-json | peak                   as python -m bench COMMAND (vitbench bench --help)
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    if argv[0] == "bench":
        from bench.__main__ import main as bench_main

        bench_main(argv[1:], prog="vitbench bench")
        return 0
    from ablations.cli.parser import main as ablations_main

    return ablations_main(argv, prog="vitbench")


def run() -> NoReturn:
    """The `vitbench` console script: `main` on the process's arguments, then the process's end
    (`bench.loading.end_process`)."""
    from bench.loading import end_process

    end_process(main())

