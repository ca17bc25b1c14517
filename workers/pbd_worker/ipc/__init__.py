"""The worker's end of the daemon link: the socket it talks to the daemon on, and the inbox
thread that reads it. The wire itself (messages, framing, shared memory) is ``pbd_wire``.
"""
