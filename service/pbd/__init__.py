"""pbd: a KServe v2 gRPC daemon for Triton Python models."""

from pbd import native as _native

__version__ = "0.1.0"

# Before any other module of pbd is imported: its compiled request path, or its sources.
_native.install()
