"""Text in: the corpus file (downloaded or the user's), d2l preprocessing, vocabularies, splits,
batches."""
