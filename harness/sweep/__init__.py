"""Tuning sweeps: the plan, running its repeats, noise statistics, the reports."""
