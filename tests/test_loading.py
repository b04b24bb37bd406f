"""Loading a command's modules without the garbage collector's passes, and a command's exit without its walks."""

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ablations.cli import parser
from bench.loading import without_gc
from bench.training import step

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_is_off_inside_and_as_it_was_afterwards_whatever_the_block_raised(collector_on):
    with without_gc():
        assert not gc.isenabled()
        assert gc.collect() >= 0   # an explicit collection still runs
    assert gc.isenabled()
    with pytest.raises(KeyError), without_gc():
        raise KeyError("x")
    assert gc.isenabled()
    gc.disable()   # off before (a caller's own choice): left off
    with without_gc():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_and_overlapping_blocks_turn_the_collector_on_once_the_outer_one_ends(collector_on):
    with without_gc():
        with without_gc():
            pass
        assert not gc.isenabled()   # the inner block found it off and leaves it off
    assert gc.isenabled()


def test_a_commands_modules_load_with_the_collector_off_and_it_is_on_again_for_the_work(collector_on, tmp_path,
                                                                                          monkeypatch):
    (tmp_path / "probe_gc_at_import.py").write_text("import gc\nON_AT_IMPORT = gc.isenabled()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(parser.PRELOAD, "columns", "probe_gc_at_import")
    module = parser._load("columns")
    import probe_gc_at_import

    assert probe_gc_at_import.ON_AT_IMPORT is False
    assert gc.isenabled()
    assert module.__name__ == "ablations.cli.read_commands" and hasattr(module, "cmd_columns")


def test_the_first_optimizer_is_built_with_the_collector_off(collector_on, monkeypatch):
    seen = []
    real = torch.optim.AdamW

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", recording)
    optimizer = step.adamw([{"params": [torch.nn.Parameter(torch.zeros(2))]}], lr=0.1)
    assert isinstance(optimizer, real) and seen == [False] and gc.isenabled()


def test_a_process_ended_by_end_process_runs_its_exit_handlers_flushes_its_output_and_exits_with_the_status():
    code = textwrap.dedent("""
        import atexit, gc, sys
        from bench.loading import end_process
        atexit.register(lambda: print("atexit ran, frozen:", gc.get_freeze_count() > 0, flush=True))
        sys.stdout.write("unflushed line")
        end_process(3)
        print("never")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "unflushed lineatexit ran, frozen: True\n"


@pytest.mark.parametrize("module", ["ablations", "ablations.cli"])
def test_the_command_line_ends_its_process_through_end_process(module):
    """`python -m ablations` and `vitbench` end with their command's status, their objects frozen for the exit."""
    code = textwrap.dedent(f"""
        import atexit, gc, runpy, sys
        atexit.register(lambda: print("frozen:", gc.get_freeze_count() > 0, flush=True))
        sys.argv = ["{module}", "columns"]
        runpy.run_module("{module}", run_name="__main__", alter_sys=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.rstrip().endswith("frozen: True")
