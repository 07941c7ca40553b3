"""What both Keras fronts share: the iterators' state, epochs, look-ahead, resume and workers.

It imports no Keras: each front (`remote_keras.keras3`, `remote_keras.keras2`) mixes these
classes into its own Keras's `Iterator` classes and names its Keras (`keras_api`: floatx,
data format, printer, `Iterator`, `ImageDataGenerator`) and its Keras line (`keras_line`).
"""
