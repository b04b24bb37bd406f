"""The report's look inside trained models: position-embedding similarity and attention maps drawn from the
saved weights of a sweep over `pos` (`wording` writes its lines). It loads torch inside its functions, where a
trained model is drawn; the rest of the report runs without torch."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ablations.analysis import figures as figs
from ablations.analysis import wording
from ablations.results.store import SweepPaths, ok_rows
from bench.io.csvio import skipped
from vit.config import ViTConfig
from vit.names import POSITION_DIM_MULTIPLE


def inside_the_model(out: Path, tables: dict[str, pd.DataFrame], factors: dict[str, str], figures: Path,
                     data_root: Path) -> list[str]:
    """Position-embedding similarity and attention maps from the saved weights of the first sweep over
    `pos` (one run per encoding)."""
    lines = wording.inside_heading()
    sweep = next((s for s, factor in factors.items() if factor == "pos" and not ok_rows(tables[s]).empty), None)
    if sweep is None:
        return lines + wording.needs_pos_sweep(out)
    ok = ok_rows(tables[sweep])
    models = {}
    for name in (pos for pos in POSITION_DIM_MULTIPLE if pos != "none"):   # the encodings with a table to draw
        match = ok[ok["pos"] == name]
        if len(match):
            model = _trained_model(match.iloc[0], SweepPaths.of(out, sweep))
            if model is not None:
                models[name] = model
    if models:
        encodings = {name: model.pos_embed.weight[0].detach() for name, model in models.items()}
        grid = next(iter(models.values())).cfg.grid_size
        sim = figs.position_similarity(encodings, grid, figures / "position-similarity.png")
        lines += [wording.figure_link("position similarity", sim.name), ""]
    if "learned" in models:
        row = ok[ok["pos"] == "learned"].iloc[0]
        # torch loads only here, where a figure draws a trained model
        from ablations.training.data import load_dataset
        from vit import POOLINGS

        try:
            data = load_dataset(str(row["dataset"]), data_root)
        except (FileNotFoundError, ValueError, RuntimeError) as err:
            return lines + wording.attention_skipped(str(row["dataset"]), err)
        from ablations.analysis.predict import Loaded, attention_figure, predict

        loaded = Loaded(models["learned"].eval(), f"{row['run_id']} (pos=learned, seed {row['seed']}, "
                                                  f"{row['dataset']})", tuple(data.mean), tuple(data.std))
        images = data.test_x[:4]
        probs, attns = predict(loaded, images)
        labels = [f"test image {i} (label {int(data.test_y[i])})" for i in range(len(images))]
        maps = attention_figure(loaded, images, attns, probs, labels, figures / "attention.png")
        lines += wording.attention_lines(maps.name, POOLINGS[loaded.model.cfg.pool].reader, loaded.name)
    return lines


def _trained_model(row: pd.Series, paths: SweepPaths):
    """The run's saved weights in its model (`vit.VisionTransformer`), or None (a damaged file is listed under
    Skipped inputs)."""
    path = paths.weights_file(str(row["run_id"]))
    if not path.exists():
        return None
    import torch

    from vit import VisionTransformer

    try:
        model = VisionTransformer(ViTConfig.from_row(row))
        model.load_state_dict(torch.load(path, weights_only=True))
    except Exception as err:
        skipped(f"{path}: weights unreadable or not this run's model ({type(err).__name__}); figures drawn without it")
        return None
    return model


