"""The Keras 2 front: `tf.keras` (TensorFlow 2.15's Keras 2.15, or `tf_keras` with
`TF_USE_LEGACY_KERAS=1`) over the same core as the Keras 3 front (`remote_keras.keras_agnostic`).

`remote_keras` picks it by itself where `tf.keras` is Keras 2 (see `remote_keras._front`).
"""
