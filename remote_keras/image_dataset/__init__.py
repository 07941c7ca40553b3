"""`image_dataset_from_directory`'s body, shared by the Keras 3 and Keras 2 fronts.

- `dataset`: the function's body (list, shuffle, split, shard, one dataset per subset);
- `arguments`: Keras's checks of the arguments, in Keras's order;
- `file_index`: the files and labels, in Keras's order;
- `reads`: each pass's reads through the package's engine, and their account;
- `tf_graph`: the `tf.data` graph (order, TensorFlow's decode, batches): the one
  module here that imports TensorFlow;
- `grain_dataset`: `format="grain"`, a `grain.IterDataset` over the same reads: the
  one module here that imports grain.
"""
