"""Word alignment: gold links, error rate (AER) and links read from cross-attention."""
