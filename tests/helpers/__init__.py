"""Test helpers (not tests): synthetic traces and exports, a fake CUDA for torch, plain-Python
twins of the Cython kernels, and the scripts some tests run in a child process. Tests import
them as ``helpers.NAME`` (tests/ is on sys.path through its conftest.py)."""
