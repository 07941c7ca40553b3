"""From bytes to batches: epoch plans, fetching, decoding, assembly, look-ahead, stats, skips.

Nothing here imports Keras or TensorFlow.
"""
