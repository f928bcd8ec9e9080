"""The compiled CPU backend: fused kernels as generated C, built with gcc (see program.py)."""
