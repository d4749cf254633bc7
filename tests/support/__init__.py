"""Shared test worlds and tools that several test packages use (never a test module)."""
