"""Local assets: the random-weight tiny model, synthetic datasets, the real small model."""
