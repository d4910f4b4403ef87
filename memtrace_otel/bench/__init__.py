"""Bench: labelled failure cases by fault injection, and their scoring."""
