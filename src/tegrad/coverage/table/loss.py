"""Cases: (being written)."""
