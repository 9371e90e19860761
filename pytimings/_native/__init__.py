"""Compiled kernels (Cython): the bottom layer. Each module here imports numpy and the C
library only, never another pytimings module, so the parsers above it (``ingest``) and the
analyses (``analysis``) can both use them without depending on each other.

- ``_sqlitescan``: SQLite table b-trees straight into numpy columns (nsys exports)
- ``_jsonscan``: Kineto JSON straight into columns (a validating single-pass scanner)
- ``_kernels``: small array kernels (sortedness, open-range depth)
- ``_intervals``: interval algebra for the partition (unions, clipping, gaps, charges)
- ``_host``: host attribution (time on a thread charged to its innermost activity)
- ``_stats``: grouped count/mean/percentiles

Every kernel has a plain-Python twin in the tests that checks it.
"""
