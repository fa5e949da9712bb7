"""Attention Studio's library: one subpackage per idea, layered one way (ARCHITECTURE.md)."""
