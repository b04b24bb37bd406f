"""Training one model: the datasets, the training loop, its checkpoints, and the step benchmark."""
