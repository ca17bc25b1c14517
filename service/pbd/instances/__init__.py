"""Model instances: worker processes, how they are launched, and how they are supervised."""
