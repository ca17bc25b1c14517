"""Prometheus metrics: pbd's own (``collector``, from the statistics counters), the CPU's, and
the server that writes them out with the models' custom ones (``pbd.instance.custom_metrics``,
which the instances feed)."""
