"""Offline tooling with a command of its own (``musaenv ablate``)."""
