"""What the Attention page computes: maps, head statistics, ablation, importance, comparison."""
