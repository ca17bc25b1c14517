"""Daemon-side memory: its segments' names, clients' regions, CUDA pools, allocator tuning."""
