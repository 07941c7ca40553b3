"""Where the bytes come from: loaders, listing, lakeFS, retries, checksums, the disk cache.

Nothing here imports Keras or TensorFlow.
"""
