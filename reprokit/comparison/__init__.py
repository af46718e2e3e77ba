"""Compare: tensors of two stages or two checkpoints, and the verdict of a variant."""
