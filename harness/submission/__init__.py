"""Submitting: round rules, preflight, calibration, packaging, the local checker, TEST06."""
