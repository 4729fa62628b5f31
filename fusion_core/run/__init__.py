"""Running a plan: fused loading, synthetic inputs, checks against the original, results, upstream parity."""
