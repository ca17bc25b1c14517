"""Ends its process on every request: systemd restarts it until the unit's start limit."""

import os


class TritonPythonModel:
    def execute(self, requests):
        os._exit(17)
