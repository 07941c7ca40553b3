"""What both Keras fronts share: the iterator core, the generator, callbacks and backup record.

It imports no Keras: each front (`remote_keras.keras3`, `remote_keras.keras2`) puts
`RemoteBatchCore` (and `DataFrameCore` or `DirectoryCore`) ahead of its own Keras's
`Iterator` classes and names its Keras (`keras_api`: floatx, data format, printer,
`Iterator`, `ImageDataGenerator`) and its Keras line (`keras_line`). The core delegates to
its parts: `scheduling.Scheduler`, `resumable.Resumable`, `lifecycle.ProcessLocal`, `files`.
"""
