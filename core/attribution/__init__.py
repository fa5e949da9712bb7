"""Token attribution: what each source and prefix token contributes to each output token."""
