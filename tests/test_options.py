"""Every run option is declared once (ablations/options.py, the executors' beside their registry): the
parsers are built from the declarations, and the Makefile's variable-to-flag list passes exactly the
declared flags, each from its declared variable, into a command line the parser reads back."""

import dataclasses
import re
import shlex
from pathlib import Path

import pytest
from conftest import run_cli, user_make

from ablations.__main__ import main as ablations_main
from ablations.options import COST_FLAGS, run_options
from ablations.running.executors import OPTIONS as EXECUTOR_OPTIONS
from ablations.running.executors import ExecutorOptions

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = run_options(EXECUTOR_OPTIONS)
SAMPLE = {"--dataset": "digits", "--seeds": "4,5", "--auto-train": "cap", "--cost-rounds": "2", "--cost-budget": "30",
          "--device": "cpu",
          "--dtype": "fp32",
          "--compile": "1", "--graphs": "0", "--cudnn-attention": "off",
          "--evaluation": "graphed", "--run-order": "listed", "--pack": "3", "--epochs": "3",
          "--checkpoint-every": "2", "--jobs": "2",
          "--threads": "1", "--max-retries": "1", "--cpus-per-task": "0.5", "--gpus-per-task": "0.25",
          "--executor": "ray", "--pretrained": "vit_tiny_patch16_224", "--out": "my out", "--init": "a b.pth",
          "--data-root": "my data", "--img-size": "224", "--mps": "on", "--workers": "processes"}


def make_line(target: str, *assignments: str) -> str:
    """The ablations command `make -n target` would run (the install step left out)."""
    done = user_make("-n", "-o", ".venv/.installed-test", target, *assignments, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.replace("\\\n", " ").splitlines()      # a recipe continued over lines is one command
    return next(line for line in lines if " -m ablations " in line)


def makefile_run_variables() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    block = text[text.index("# Run settings"):text.index("opt = ")]
    return [m.group(1) for m in re.finditer(r"^([A-Z_]+)\s*\?=", block, re.M) if m.group(1) not in ("PRESET", "PYTEST_ARGS")]


def test_each_option_is_declared_once_with_a_makefile_variable_and_help():
    flags = [o.flag for o in OPTIONS]
    assert len(flags) == len(set(flags)), "a flag declared twice"
    assert all(o.make and o.help for o in OPTIONS)
    assert sorted(o.make for o in OPTIONS) == sorted(makefile_run_variables())
    assert set(SAMPLE) | {o.flag for o in OPTIONS if o.switch} == set(flags)


def test_each_executor_option_is_a_field_of_executor_options():
    fields = {f.name for f in dataclasses.fields(ExecutorOptions)}
    for name, options in EXECUTOR_OPTIONS.items():
        assert {o.dest for o in options} <= fields, name


@pytest.mark.parametrize("target", ["ablations", "train"])
def test_the_makefile_passes_every_declared_flag_from_its_variable_and_the_parser_reads_it_back(target):
    assignments = [f"{o.make}={'1' if o.switch else SAMPLE[o.flag]}" for o in OPTIONS]
    line = make_line(target, *assignments)
    argv = shlex.split(line.split(" -m ablations ", 1)[1])
    passed = [a for a in argv if a.startswith("--")]
    assert sorted(passed) == sorted(o.flag for o in OPTIONS)  # each declared flag once, nothing undeclared
    parsed = {}

    def capture(args):
        parsed.update(vars(args))
        return 0
    import ablations.cli.commands as commands

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(commands, f"cmd_{'sweep' if target == 'ablations' else 'train'}", capture)
        assert ablations_main(argv) == 0
    for o in OPTIONS:
        expected = True if o.switch else (o.type or str)(SAMPLE[o.flag])
        assert parsed[o.dest] == expected, o.flag


def test_the_evaluation_option_offers_the_evaluators_choices_and_reaches_the_runs_options():
    """`--evaluation` (EVALUATION) lists exactly the evaluations a run can ask for, and a sweep's runs get it."""
    from ablations.cli.prepare import run_options
    from ablations.training.evaluation import EVALUATIONS

    option = next(o for o in OPTIONS if o.flag == "--evaluation")
    assert tuple(option.choices) == EVALUATIONS and option.default == "eager"
    from ablations.cli.parser import build

    for argv, expected in ((["sweep", "depth"], "eager"), (["sweep", "depth", "--evaluation", "graphed"], "graphed")):
        args = build().parse_args(argv)
        assert run_options(args, "", "").evaluation == expected


def test_the_cost_target_passes_exactly_the_flags_the_cost_command_declares():
    """`cost` takes a declared subset of the run options (options.COST_FLAGS): the parser builds it from that
    list and `make cost` passes each of them from its variable, nothing else."""
    by_flag = {o.flag: o for o in OPTIONS}
    line = make_line("cost", *(f"{by_flag[f].make}={'1' if by_flag[f].switch else SAMPLE[f]}" for f in COST_FLAGS))
    argv = shlex.split(line.split(" -m ablations ", 1)[1])
    assert argv[0] == "cost" and sorted(a for a in argv if a.startswith("--")) == sorted(COST_FLAGS)
    parsed = {}
    import ablations.cli.measure_commands as commands

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(commands, "cmd_cost", lambda args: parsed.update(vars(args)) or 0)
        assert ablations_main(argv) == 0
    for flag in COST_FLAGS:
        o = by_flag[flag]
        assert parsed[o.dest] == (True if o.switch else (o.type or str)(SAMPLE[flag])), flag


def test_empty_makefile_variables_leave_the_programs_defaults():
    line = make_line("ablations")
    argv = shlex.split(line.split(" -m ablations ", 1)[1])
    assert argv == ["sweep", "default", "--out", "results"]  # the one variable the Makefile itself needs
    assert next(o for o in OPTIONS if o.flag == "--out").default == "results"
    for value, passed in (("0", False), ("1", True), ("yes", True)):
        assert ("--dry-run" in make_line("ablations", f"DRY_RUN={value}")) is passed


def test_a_run_options_default_and_choices_are_its_declarations():
    """`RunOptions` writes no default or choice of its own for a field named like a declared run option: its
    default is the declaration's (a switch's False), and a value outside the declared choices is refused in one
    line naming them, whichever field it is."""
    from ablations.cli.prepare import DERIVED
    from ablations.options import RUN
    from ablations.running.tasks import RunOptions

    declared = {option.dest: option for option in RUN}   # those the command derives (its seeds, …) aside
    fields = {f.name: f for f in dataclasses.fields(RunOptions) if f.name in declared and f.name not in DERIVED}
    assert {"dataset", "device", "out", "evaluation", "run_order", "cudnn_attention", "checkpoint_every"} <= set(fields)
    for name, f in fields.items():
        option = declared[name]
        assert f.default == (False if option.switch else option.default), name
        if option.choices:
            with pytest.raises(ValueError, match=rf"^{name}='nope' is unknown; choose one of \["):
                RunOptions(**{name: "nope"})
            RunOptions(**{name: list(option.choices)[-1]})   # every declared choice is taken


@pytest.mark.parametrize("given,seeds", [("0-4", (0, 1, 2, 3, 4)), ("0–2,10", (0, 1, 2, 10)), ("7", (7,)),
                                         (" 3 , 1-2 ", (3, 1, 2))])
def test_seeds_take_ranges_as_the_report_writes_them_both_ends_included(given, seeds):
    from ablations.choices import parse_seeds

    assert parse_seeds(given) == seeds


@pytest.mark.parametrize("given,said", [("5-2", "a range of seeds runs upward over at most 10,000 of them, got '5-2'"),
                                        ("0-10000", "a range of seeds runs upward over at most 10,000 of them"),
                                        ("0-2,1", "seeds name a seed twice: '0-2,1'"),
                                        ("0-", "seeds must be comma-separated integers, ranges (0-17) or auto"),
                                        ("-1", "seed -1 is out of range")])
def test_a_bad_range_of_seeds_is_one_line_naming_it(capsys, given, said, tmp_path):
    code, _, err = run_cli(ablations_main, ["sweep", "depth", "--seeds", given, "--dry-run", "--out", str(tmp_path)],
                           capsys)
    assert code == 2 and said in err and err.count("\n") == 1, err
