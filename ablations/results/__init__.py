"""The results folder: the column dictionary, the sweep tables and their files (the store), experiment
identity, TensorBoard events, and upgrading older tables."""
