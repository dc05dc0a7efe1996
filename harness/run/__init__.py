"""One LoadGen run, in three rooms, each importing only the ones below it: record/ (what a run
leaves behind) < setup/ (what a run is, checked before the engine starts) < execute/ (how it
runs)."""
