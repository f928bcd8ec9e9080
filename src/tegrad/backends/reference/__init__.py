"""The NumPy reference target."""
