"""Every Plotly figure the pages show: attention maps, comparisons, importance, training curves."""
