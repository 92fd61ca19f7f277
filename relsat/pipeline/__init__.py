"""The pipeline: :func:`~relsat.pipeline.optimize.optimize` as named stages over one run record.

``options`` (:class:`Options`, every setting as one frozen value), ``run`` (the :class:`Run`
record and the :class:`Stage` progress event), then one module per stage, in the order they
run: ``load`` (a Graph, or an ONNX model read by :func:`relsat.onnx.read`), ``folding`` (fold
repeated blocks, with ``blocks`` finding them; unfold at the end), ``explore``, ``price``,
``extract``, ``decode``, ``tidy``, ``verify``, ``ort`` (for an ONNX input: export, check in
onnxruntime, time, choose), ``result`` (the :class:`Result`, a view of the finished run),
``save`` (atomic writes) and ``optimize`` (the driver).
"""
