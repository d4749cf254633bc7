"""Thin Lambda entry points: each adapts its event and calls the library."""
