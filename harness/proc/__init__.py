"""Child processes and signals: what every long-running command shares."""
