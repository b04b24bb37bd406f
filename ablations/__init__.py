"""Data, training, sweep specs and the sweep runner: the ablations behind `make ablations`."""
