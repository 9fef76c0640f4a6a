"""The doctor: check registry, runner, multi-rank launcher and thresholds."""
