"""Files: CSV tables that survive a crash and any column order, atomic writes, `--set` overrides."""
