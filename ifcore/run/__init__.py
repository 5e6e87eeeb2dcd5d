"""What drives the trainer: the sweep the stage notebooks run, and its job backends.

- `sweep.py`: arms x seeds of `ifcore train` in child processes (`run_arms(..., backend=...)`), each run in a
  directory keyed by its configuration (reused only when that matches), one progress bar, children stopped on
  interrupt.

- `ray_jobs.py`: a Ray cluster's job API over plain HTTP (submit, status, logs, stop, wait); no ray package on the
  client. Backend "ray" submits each run's `python -m ifcore train --config RUN/run_config.json` through it.
- `openrlhf.py`: the OpenRLHF 0.11.2 command (checked against the pinned release's parser) training what
  `ifcore train` trains with the same TrainConfig; backend "openrlhf" submits it as a Ray job.
- `curves.py`: an OpenRLHF run's TensorBoard events (or its stdout) as rows of the embedded trainer's
  metrics.jsonl schema, so that every figure is drawn the same way from either engine.

This part may import train (for the local backend) and integrations; neither imports it.
"""
