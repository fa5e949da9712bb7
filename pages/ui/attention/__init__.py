"""The Attention page's sections, their inputs and their cached calls."""
