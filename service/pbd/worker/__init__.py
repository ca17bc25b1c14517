"""The daemon's side of a worker process, whatever model it runs.

``launcher`` (how a worker process is started and stopped; ``pbd.systemd.launcher`` is the
other launcher) · ``hub`` (the socket workers connect to, and who may) · ``link`` (one
worker's connection: frames in and out) · ``connect`` (waiting for a started worker to
connect, or to exit first). Nothing here knows what a model is: ``pbd.instance`` runs a model
instance in a worker, ``pbd.repository.autocomplete`` a model's ``auto_complete_config``.
"""
