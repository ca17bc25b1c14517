"""BLS in the daemon: the calls models make to other models, and their model control.

``service`` runs calls through the dataplane and answers the caller's worker; ``pool`` lends
callers blocks of the CUDA memory pool for GPU inputs; ``wait_graph`` finds calls that could
never run (deadlocks). The instances know nothing of this package: they hand their worker's
BLS messages (``pbd.instance.instance.BLS_KINDS``) to the ``bls`` sink the daemon lends them
(``InstanceServices``), which is this service.
"""
