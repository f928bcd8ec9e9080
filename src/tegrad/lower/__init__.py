"""Lowering: from tensor expressions to a plan of kernels, shared by every backend."""
