"""The Train page: the New run form, a run's view, the runs table, saving a model."""
