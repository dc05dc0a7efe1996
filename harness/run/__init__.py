"""One LoadGen run: the runner, its TestSettings, LoadGen log parsing, the result table."""
