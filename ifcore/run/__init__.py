"""Job backends behind the stage notebooks (`run_arms(..., backend=...)` of ifcore.train.sweep):

- `ray_jobs.py`: a Ray cluster's job API over plain HTTP (submit, status, logs, stop, wait); no ray package on the
  client. Backend "ray" submits each run's `python -m ifcore train --config RUN/run_config.json` through it.
- `openrlhf.py`: the OpenRLHF 0.11.2 command (checked against the pinned release's parser) training what
  `ifcore train` trains with the same TrainConfig; backend "openrlhf" submits it as a Ray job.
- `curves.py`: an OpenRLHF run's TensorBoard events (or its stdout) as rows of the embedded trainer's
  metrics.jsonl schema, so that every figure is drawn the same way from either engine.

This part may import train (for the local backend) and integrations; integrations never import it.
"""
