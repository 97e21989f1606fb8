"""Markers for the example-set checks."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (compiles CUDA sources with nvcc); -m 'not slow' skips it")
