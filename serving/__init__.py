"""The serving format: one home for what the batch layer writes and readers map.

* :mod:`serving.files`: Arrow IPC files (one uncompressed record batch, fsynced,
  byte-reproducible), checksums, atomic text writes;
* :mod:`serving.manifest`: generation ids and ``manifest.json`` (built, read);
* :mod:`serving.segments`: a board's segment files (display-order rows, player-id
  index, equi-depth buckets, hidden side file): writer and memory-mapped reader;
* :mod:`serving.registry`: the published generations a process can see.
* :mod:`serving.awards`: award snapshots of closed seasons (versioned, immutable);
* :mod:`serving.verify_state`: the last ``lb verify`` result (``run/verify.json``).

``jobs/`` writes through it, ``api/`` and ``speed/`` read through it. It must not
import pyspark (the API process imports it) nor ``api``/``jobs``/``speed``.
"""
