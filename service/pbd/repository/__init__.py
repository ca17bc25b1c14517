"""The model repository: configuration files and the models loaded from them."""
