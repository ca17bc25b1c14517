"""Daemon-side memory housekeeping: /dev/shm segments of dead daemons, allocator tuning."""
