"""A model file that does not compile: the daemon must report it and serve the others."""


class TritonPythonModel:
    def execute(self, requests)
        return []
