"""Prometheus metrics: pbd's own (from the statistics counters) and the models' custom ones."""
