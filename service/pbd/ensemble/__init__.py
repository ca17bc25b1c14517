"""Ensembles (``platform: "ensemble"``): a pipeline of other models' steps, run in the daemon.

``pbd.modelconfig.ensemble`` reads and checks ``ensemble_scheduling`` (the checks Triton makes
of the config alone: it is part of the config record); ``validate`` checks it against the step
models' configs when the ensemble loads; ``graph`` is the pure dependency scheduler (which
steps can start, forks per response of a decoupled step); ``step_call`` runs one step on its
model, ``runner`` one ensemble request, ``runtime`` is the ensemble as a served model version.
"""
