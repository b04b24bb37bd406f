"""The fixed column names of the result tables (CONTRACT §3), in the order files are written."""

IDENTITY = ["run_id", "started_at", "git_sha", "host", "device", "device_name", "torch_version", "dtype",
            "compile", "status", "error"]
CONFIG = ["img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads",
          "mlp_ratio", "attn", "pos", "norm", "tokens"]
COST = ["params", "gmacs", "gflops"]
SPEED = ["mode", "batch_size", "throughput_img_s", "step_ms_median", "step_ms_iqr", "peak_mem_mb",
         "util_pct", "util_source", "mfu"]
TRAINING = ["sweep", "dataset", "seed", "epochs", "lr", "train_time_s", "train_loss", "test_loss",
            "test_acc", "best_test_acc", "train_throughput_img_s", "init", "test_size", "cost_rounds", "reused_from"]

# beyond the contract: what the sampler and timer also saw, and the rest of ViTConfig
EXTRA = ["gpu_mem_used_mb", "power_w", "repeats", "qkv_bias", "dropout", "attn_dropout", "pool", "stem"]

BENCH_COLUMNS = IDENTITY + CONFIG + COST + SPEED + EXTRA
ABLATION_COLUMNS = IDENTITY + CONFIG + COST + SPEED + TRAINING + EXTRA
# a sweep's cost phase (ablations.cost): one row per point, mode and interleaved round
COST_COLUMNS = BENCH_COLUMNS + ["sweep", "phase_id", "round", "rounds", "phase_items"]
HISTORY_COLUMNS = ["run_id", "epoch", "lr", "train_loss", "test_loss", "test_acc", "elapsed_s"]
STATUSES = ("ok", "oom", "diverged", "error")

# what differs between two runs of one config: when, where and how fast (not what was computed)
MEASURED = ["started_at", "host", "throughput_img_s", "step_ms_median", "step_ms_iqr", "peak_mem_mb", "util_pct",
            "mfu", "train_time_s", "train_throughput_img_s", "gpu_mem_used_mb", "power_w", "repeats"]
