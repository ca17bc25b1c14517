"""pbd: a KServe v2 gRPC daemon for Triton Python models."""

__version__ = "0.1.0"
