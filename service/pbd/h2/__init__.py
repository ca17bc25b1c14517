"""HTTP/2 (RFC 9113) server connections for pbd's gRPC front end: framing, HPACK header blocks,
flow control and stream lifetimes, with no knowledge of gRPC (see ``pbd.grpc.calls``)."""
