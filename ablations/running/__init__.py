"""Running a command's runs: tasks and their ids, the cost phase, the executors (local worker processes,
CUDA MPS, Ray), the worker that trains one run, and signals. Never imports `ablations.analysis`."""
