"""What both Keras fronts share: the iterators' state, epochs, look-ahead, resume and workers.

It imports no Keras: each front (`remote_keras.keras3`, `remote_keras.keras2`) mixes these
classes into its own Keras's `Iterator` classes and names its Keras (`keras_api`), which
`pixels.KerasHooks` asks for the Keras-specific hooks (`_keras_*` methods, `batch_pixels`).
"""
