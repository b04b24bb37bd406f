"""A short crash campaign (tests/crash.py): SIGKILLs at random instants, one inside a save step, a torn
last line, garbage lines and, where a tmpfs can be mounted, a full filesystem; then every run has one
ok row equal to the uninterrupted sweep's and the report lists what it skipped. `make crash-test` runs
the long ones (24 kills each, with one job and with JOBS=2)."""

import pytest
from crash import campaign, jobs_campaign

pytestmark = pytest.mark.slow   # `make test-quick` leaves this module out


def test_a_short_crash_campaign_loses_nothing_and_ends_whole(tmp_path):
    tally = campaign(tmp_path, kills=2, seed=1)
    assert tally.problems == []
    assert tally.kills == 2 and tally.kills_in_save == 1
    assert tally.torn_cut == 1 and tally.garbage_skipped == 2


def test_a_short_jobs_2_campaign_loses_nothing_and_ends_equal_to_an_uninterrupted_sweep(tmp_path):
    tally = jobs_campaign(tmp_path, kills=3, seed=2)
    assert tally.problems == []
    # a worker SIGKILLed (a new worker resumes its run), the driver SIGKILLed (its workers die with it and the
    # rerun keeps every finished run), SIGTERM (exit 143 within 10 s, no worker left)
    assert (tally.kills, tally.worker_kills, tally.driver_kills, tally.term_stops) == (3, 1, 1, 1)
