"""Calibration: the target QPS a valid run needs, measured on this machine. The request, the
trials on one engine, the Offline measurement, the Server search and its confirmation, and
calibration.json, the record programs read."""
