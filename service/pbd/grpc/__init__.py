"""The gRPC edge: the only package that uses the generated protobuf modules of the public API."""
