"""Independent PyTorch implementations of Hugging Face forward passes: the parity
references of the tests and the eager baselines of the benchmarks."""
