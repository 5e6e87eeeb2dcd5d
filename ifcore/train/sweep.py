"""Moved to ifcore.run.sweep (run/ drives the trainer; train/ knows nothing of backends). This re-export keeps
notebooks 02-04's `from ifcore.train.sweep import ...` working until they import ifcore.run.sweep; then it goes
(tests/test_imports.py fails once no notebook needs it)."""
from ifcore.run.sweep import finished, load_metrics, load_rollouts, run_arms  # noqa: F401
