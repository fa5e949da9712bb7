"""What the analysis packages share to measure a model on many sentences: the validation
sample, progress reports, cache keys and rank correlation."""
