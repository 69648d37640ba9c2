"""Training the learned ranking stage (`citewise rank train`): ``training.py``."""
