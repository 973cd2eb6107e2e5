"""Triton kernels (forward.py, backward.py), their candidate configs (configs.py), the config
choice and launches (launch.py, tuning.py), the passes' arguments and grids (passes.py) and the
PyTorch operators with their autograd (ops.py)."""
