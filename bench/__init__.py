"""Benchmarks behind `make bench`: our code and its baseline side by side, reported as ratios."""
