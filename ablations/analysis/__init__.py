"""Reading results: the statistics, one sweep's findings, designs (grids, tuning), figures, the report,
compare, predict, and the calibration of the report's test. Never imports `ablations.running`."""
