"""pb_utils.MetricFamily of each kind, one Metric each, updated in execute. The families are
kept: a family that is garbage-collected takes its metrics with it (Triton: "Invalid metric
operation as the corresponding 'MetricFamily' has been deleted")."""

import numpy as np

import triton_python_backend_utils as pb_utils

BUCKETS = [1.0, 10.0, 100.0]


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        family = pb_utils.MetricFamily
        self.families = [
            family("metered_requests", "Requests the metered model answered", family.COUNTER),
            family("metered_last_sum", "INPUT0 summed, last request", family.GAUGE),
            family("metered_sum", "INPUT0 summed, every request", family.HISTOGRAM),
        ]
        counter, gauge, histogram = self.families
        self.requests = counter.Metric(labels=labels)
        self.last_sum = gauge.Metric(labels=labels)
        self.sums = histogram.Metric(labels=labels, buckets=BUCKETS)

    def execute(self, requests):
        responses = []
        for request in requests:
            total = float(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().sum())
            self.requests.increment(1)
            self.last_sum.set(total)
            self.sums.observe(total)
            count = np.array([self.requests.value()], np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]))
        return responses
