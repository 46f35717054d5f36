"""Speed, measured as ratios against a peer run side by side in the same run (``python -m benchmarks``)."""
