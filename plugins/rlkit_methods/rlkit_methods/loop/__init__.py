"""The loop every method's trainer shares, whatever the engine: deterministic batching,
atomic checkpoints, the metrics log, the progress display and the end-of-run report."""
