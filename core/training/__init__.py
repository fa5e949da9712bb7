"""How to train: TrainConfig, run settings and presets, the training loop, torchrun, devices."""
