"""What a training step is, for `bench` to measure and `ablations` to train with: the recipe
(`TrainConfig`), the step (eager or captured into a CUDA graph), and the dtypes it runs in."""
