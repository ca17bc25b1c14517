"""The caller's half of the worker protocol, written once for every process that sends
requests to workers: the daemon's instances (``pbd.instance``) and a front end's direct path
(``pbd.fronts.direct``).

- ``describe``: a request as the worker reads it (``Request``: its inputs named where they
  lie, or copied into an arena);
- ``results``: what a worker's answers mean (a streamed response's item, a response's
  parameters, the share of a batch that failed);
- ``releases``: output blocks given back to the worker, riding on the next frame;
- ``error_log``: a model's failures, logged without flooding the log.
"""
