"""The Keras 3 front: Keras's own iterators and callbacks, subclassed over the pipeline."""
