"""The worker's connections: to the daemon (``daemon_link``) and, on the direct path, from front
ends (``front_links``). The wire itself (messages, framing, shared memory) is ``pbd_wire``.
"""
