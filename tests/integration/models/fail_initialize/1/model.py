"""A model whose initialize() fails: it must end up UNAVAILABLE with this reason."""


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("init exploded")

    def execute(self, requests):
        raise AssertionError("execute must never run on a model that failed to initialize")
