"""The worker's connections: to the daemon (``daemon_link``) and, on the direct path, from front
ends (``front_connections``). The wire itself (messages, framing, shared memory) is ``pbd_wire``.
"""
