"""BLS in the daemon: the calls models make to other models, and their model control.

``service`` runs calls through the dataplane and answers the caller's worker; ``pool`` lends
callers blocks of the CUDA memory pool for GPU inputs; ``wait_graph`` finds calls that could
never run (deadlocks); ``kinds`` names the worker messages that are BLS. This package imports
none of its modules: the instances import ``kinds`` without pulling in the service.
"""
