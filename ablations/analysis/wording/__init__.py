"""The words and tables of the report, written from the numbers the analysis computed; `report.py` lays them out.

- `verdicts`: the outcome vocabulary and a sweep's verdict, design, chance, power and cost sentences, why it has no
  test or has not converged (`findings`, `budget`), and the SEEDS=auto driver's per-look line;
- `tables`: a sweep's settings, latency, pairs and interval-parts tables, its figure's caption;
- `method`: the Method section;
- `summary`: the findings table the report opens with, a row per sweep (`answers` holds its figures);
- `sections`: the rest of a section (runs, shared runs, device sharing, what was held fixed, sittings, tuning and
  grid interaction from `designs`, GPU phases) and the report's other parts (the reference comparison, the Pareto
  fronts, what a partial OUT lacks, the attention backends' bench section).

Callers use `wording.<name>`: every public name of the five is here."""

from __future__ import annotations

from ablations.analysis.wording.method import (
    either,
    method,
)
from ablations.analysis.wording.sections import (
    attention_lines,
    attention_skipped,
    bench_lines,
    failed_lines,
    figure_link,
    grid_caption,
    held_fixed,
    inside_heading,
    interaction_lines,
    lacking_lines,
    missing_table,
    needs_pos_sweep,
    not_built,
    not_compared_line,
    or_dash,
    pareto_front_lines,
    pareto_groups,
    pareto_heading,
    pareto_left_out,
    phases_lines,
    reference_lines,
    report_head,
    runs_line,
    shared_line,
    sharing_note,
    sittings_line,
    skipped_lines,
    sweep_heading,
    throughput_source,
    tuning_lines,
)
from ablations.analysis.wording.summary import findings_table
from ablations.analysis.wording.tables import (
    PAIR_COLUMNS,
    SETTING_COLUMNS,
    comparisons_markdown,
    components_markdown,
    figure_caption,
    pair_rows,
    pairs_heading,
    setting_rows_csv,
    table_markdown,
)
from ablations.analysis.wording.verdicts import (
    OUTCOME_MARKERS,
    OUTCOME_WORDS,
    SEEDS_SHOWN,
    answer_text,
    auto_sentence,
    chance_sentence,
    cost_sentence,
    cost_source,
    design_note,
    design_progress,
    design_sentence,
    futile_reason,
    interval_text,
    margin_text,
    no_test,
    not_converged,
    pair_outcome,
    pct,
    power_sentence,
    seed_ranges,
    shortfall,
    unconverged_headline,
    undecided_reason,
    verdict_sentence,
)

__all__ = [
    "PAIR_COLUMNS", "SETTING_COLUMNS", "answer_text", "setting_rows_csv", "findings_table", "pair_rows",
    "OUTCOME_MARKERS", "OUTCOME_WORDS", "SEEDS_SHOWN", "attention_lines",
    "attention_skipped", "auto_sentence", "bench_lines", "chance_sentence", "comparisons_markdown",
    "components_markdown", "cost_sentence", "cost_source", "design_note", "design_progress",
    "design_sentence", "either", "failed_lines", "figure_caption", "futile_reason", "grid_caption",
    "figure_link", "held_fixed", "inside_heading", "interaction_lines", "interval_text", "lacking_lines", "margin_text",
    "method", "missing_table", "needs_pos_sweep", "no_test", "not_built", "not_compared_line",
    "not_converged", "or_dash", "pair_outcome", "pairs_heading", "pareto_front_lines", "pareto_groups",
    "pareto_heading", "pareto_left_out", "pct", "phases_lines", "power_sentence", "reference_lines",
    "report_head", "runs_line", "seed_ranges", "shared_line", "sharing_note", "shortfall", "sittings_line",
    "skipped_lines", "sweep_heading", "table_markdown", "throughput_source", "tuning_lines",
    "unconverged_headline", "undecided_reason", "verdict_sentence",
]
