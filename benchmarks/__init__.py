"""compactd benchmarks (run as modules, e.g. `python -m benchmarks.tokenizer`)."""
