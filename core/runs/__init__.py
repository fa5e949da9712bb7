"""A run on disk and its trainer process: files, status, jobs, locks, the model catalogue."""
