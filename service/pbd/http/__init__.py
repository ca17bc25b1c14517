"""The KServe v2 HTTP/REST binding: the same dataplane as gRPC, reached through aiohttp."""
