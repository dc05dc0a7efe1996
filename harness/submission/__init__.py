"""Submitting: round rules, preflight, packaging, the local checker, TEST06 (calibration is
harness.calibrate)."""
