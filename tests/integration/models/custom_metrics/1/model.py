"""A model with its own metrics: a counter, a gauge and a histogram, labelled per model.

A request with the parameter ``check`` set runs the metric API's contract inside the model
(what Triton's custom-metrics tests check) and fails if any of it does not hold.
"""

import json

import triton_python_backend_utils as pb_utils

BUCKETS = [1.0, 10.0, 100.0]


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.requests_family = pb_utils.MetricFamily(
            name="custom_requests",
            description="Requests this model served",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.size_family = pb_utils.MetricFamily(
            name="custom_last_size",
            description="Elements in the last input",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        self.sum_family = pb_utils.MetricFamily(
            name="custom_input_sum",
            description="Sums of the inputs",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.requests = self.requests_family.Metric(labels=labels)
        self.size = self.size_family.Metric(labels=labels)
        self.sums = self.sum_family.Metric(labels=labels, buckets=BUCKETS)

    def execute(self, requests):
        responses = []
        for request in requests:
            if json.loads(request.parameters()).get("check"):
                self._check_api()
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            self.requests.increment(1)
            self.size.set(data.size)
            self.sums.observe(float(data.sum()))
            out = pb_utils.Tensor("OUTPUT0", data)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses

    def _check_api(self):
        def refused(call, text):
            try:
                call()
            except pb_utils.TritonModelException as exc:
                assert text in str(exc), str(exc)
            else:
                raise AssertionError(f"not refused: {text}")

        counter = pb_utils.MetricFamily("check_counter", "c", pb_utils.MetricFamily.COUNTER)
        gauge = pb_utils.MetricFamily("check_gauge", "g", pb_utils.MetricFamily.GAUGE)
        histogram = pb_utils.MetricFamily("check_hist", "h", pb_utils.MetricFamily.HISTOGRAM)
        c = counter.Metric(labels={"k": "v"})
        assert c.value() == 0.0
        c.increment(2023.0)
        assert c.value() == 2023.0
        refused(lambda: c.increment(-1), "can only be incremented monotonically")
        refused(lambda: c.set(1), "does not support Set")
        refused(lambda: c.observe(1), "does not support Observe")
        g = gauge.Metric()
        g.increment(5)
        g.increment(-1.5)
        assert g.value() == 3.5
        g.set(999.9)
        assert g.value() == 999.9
        h = histogram.Metric(labels={}, buckets=[0.1, 1.0])
        refused(lambda: h.value(), "does not support Value")
        refused(lambda: h.increment(1), "does not support Increment")
        refused(lambda: histogram.Metric(labels={}), "Missing required buckets")
        refused(lambda: histogram.Metric(buckets=[2.5, 0.1]), "strictly increasing")
        refused(lambda: histogram.Metric(buckets=[1, 1]), "strictly increasing")
        refused(lambda: counter.Metric(buckets=[1.0]), "Unexpected buckets found")
        refused(lambda: counter.Metric(labels="x"), "Labels must be a dictionary")
        histogram.Metric(labels={"empty": "yes"}, buckets=[])
        # Same name and kind: the same family; same labels: the same series.
        again = pb_utils.MetricFamily("check_counter", "other text", pb_utils.MetricFamily.COUNTER)
        assert again.Metric(labels={"k": "v"}).value() == 2023.0
        refused(
            lambda: pb_utils.MetricFamily("check_counter", "c", pb_utils.MetricFamily.GAUGE),
            "already exists",
        )
        refused(
            lambda: pb_utils.MetricFamily("nv_inference_count", "x", pb_utils.MetricFamily.COUNTER),
            "reserved",
        )
        # A family outlived by its metric: the metric refuses every operation.
        doomed = pb_utils.MetricFamily("check_doomed", "d", pb_utils.MetricFamily.GAUGE)
        orphan = doomed.Metric()
        del doomed
        refused(lambda: orphan.set(1), "'MetricFamily' has been deleted")
        refused(lambda: orphan.value(), "'MetricFamily' has been deleted")
