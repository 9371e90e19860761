"""Per-op perf models (FLOPs and bytes per call), op and kernel categories, GPU peaks, roofline.

``model_op`` gives an op call (its name, input shapes and types as the profiler recorded
them) its category and, where a family's formula fits, its FLOPs and bytes; ``roofline``
places the achieved rates under a GPU's peaks (``gpu_from_trace``, ``gpu_spec``). The
formulas and their sources are in docs/ops.md.
"""

from pytimings.analysis.ops.calls import CATEGORIES, OpCall, OpCost
from pytimings.analysis.ops.gpus import TABLE, GpuSpec, gpu_from_trace, gpu_spec
from pytimings.analysis.ops.registry import FAMILIES, category_of_kernel, model_op, of_interest
from pytimings.analysis.ops.roofline import Roofline, roofline

__all__ = [
    "CATEGORIES",
    "FAMILIES",
    "TABLE",
    "GpuSpec",
    "OpCall",
    "OpCost",
    "Roofline",
    "category_of_kernel",
    "gpu_from_trace",
    "gpu_spec",
    "model_op",
    "of_interest",
    "roofline",
]
