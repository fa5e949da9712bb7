"""The d2l encoder-decoder Transformer, its loss, decoding, checkpoints and scores."""
