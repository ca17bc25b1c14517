"""pbd's benchmark: pbd against a bare echo server (the ceiling), measured in the same run."""
