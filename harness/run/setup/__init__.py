"""What a run is, and what it is checked against before its engine starts: the spec (its
options), LoadGen's settings and user.conf, the model's weights and layout, the Ray cluster."""
