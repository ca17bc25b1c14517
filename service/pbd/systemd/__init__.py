"""pbd under systemd: unit files and their installation, and the launcher that runs each model
instance as a ``pbd-worker@`` unit."""
