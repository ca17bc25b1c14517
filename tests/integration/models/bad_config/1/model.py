"""A valid model behind an unparsable config.pbtxt; it must never be loaded."""


class TritonPythonModel:
    def execute(self, requests):
        raise AssertionError("a model with a malformed config.pbtxt must never run")
