"""Triton kernels (forward.py, backward.py), their config choice (configs.py) and the
launchers with the autograd Function (launch.py)."""
