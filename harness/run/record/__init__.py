"""What a run leaves behind: result.json, LoadGen's and the engine's logs read back, the
timeline, the profile's summary, the environment, the cost, the tables that compare runs."""
