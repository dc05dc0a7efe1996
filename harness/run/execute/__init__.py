"""How a run runs: the runner's steps, the engine session, LoadGen's call, the warm-up, and a
run in a child process."""
