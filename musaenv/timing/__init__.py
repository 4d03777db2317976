"""Timers, cache flushing and statistics (device-side parts import torch lazily)."""
