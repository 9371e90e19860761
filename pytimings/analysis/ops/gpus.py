"""GPU peaks for the roofline: dense TFLOP/s per dtype and HBM TB/s, from vendor datasheets.

Every number is dense (NVIDIA datasheets print tensor-core rates "with sparsity", twice the
dense rate; the table holds half of those). ``fp32`` is the rate an fp32 GEMM reaches without
reduced precision (NVIDIA: the CUDA cores, as tensor cores need TF32; AMD: FP32 matrix
cores), ``fp64`` the FP64 tensor/matrix rate. A dtype the GPU cannot compute natively (fp8
before Hopper and CDNA3, fp4 before Blackwell and CDNA4) is absent, so no bound is claimed.

``--gpu-spec`` takes a name from this table (or a name as a trace writes it), or a JSON file:
``{"name": "X", "peak_tflops": {"bf16": 989.5, "fp8": 1979.0}, "peak_tb_s": 3.35,
"source": "optional note"}`` (dtypes among fp64, fp32, tf32, bf16, fp16, fp8, fp4, int8).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field

from pytimings.errors import UsageError

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's dense peaks: TFLOP/s per compute dtype and memory TB/s, with their source."""

    name: str
    peak_tflops: dict[str, float]
    peak_tb_s: float
    source: str = ""
    aliases: tuple[str, ...] = field(default=(), compare=False)


def _peaks(
    fp64: float,
    fp32: float,
    tf32: float | None,
    half: float,
    fp8: float | None,
    fp4: float | None,
    int8: float | None,
) -> dict[str, float]:
    out = {
        "fp64": fp64,
        "fp32": fp32,
        "tf32": tf32,
        "bf16": half,
        "fp16": half,
        "fp8": fp8,
        "fp4": fp4,
        "int8": int8,
    }
    return {k: v for k, v in out.items() if v is not None}


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021): dense rates; bandwidth per model"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet: sparsity rates halved"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet: sparsity rates halved"
_BLACKWELL = (
    "NVIDIA Blackwell datasheets ({}): dense rates per GPU (as tabulated at "
    "glennklockwood.com/garden/processors/B200)"
)

TABLE: tuple[GpuSpec, ...] = (
    GpuSpec(
        "A100-SXM-40GB",
        _peaks(19.5, 19.5, 156, 312, None, None, 624),
        1.555,
        _A100,
        ("a100sxm440gb", "a100sxm4"),
    ),
    GpuSpec(
        "A100-SXM-80GB",
        _peaks(19.5, 19.5, 156, 312, None, None, 624),
        2.039,
        _A100,
        ("a100sxm480gb",),
    ),
    GpuSpec(
        "A100-PCIe-40GB",
        _peaks(19.5, 19.5, 156, 312, None, None, 624),
        1.555,
        _A100,
        ("a100pcie40gb", "a100pcie"),
    ),
    GpuSpec(
        "A100-PCIe-80GB",
        _peaks(19.5, 19.5, 156, 312, None, None, 624),
        1.935,
        _A100,
        ("a10080gbpcie", "a100pcie80gb"),
    ),
    GpuSpec(
        "H100-SXM",
        _peaks(67, 67, 494.5, 989.5, 1979, None, 1979),
        3.35,
        _H100,
        ("h10080gbhbm3", "h100sxm580gb", "h100sxm5", "h100"),
    ),
    GpuSpec(
        "H100-PCIe",
        _peaks(51, 51, 378, 756.5, 1513, None, 1513),
        2.0,
        _H100,
        ("h100pcie", "h100pcie80gb"),
    ),
    GpuSpec(
        "H100-NVL", _peaks(60, 60, 417.5, 835.5, 1670.5, None, 1670.5), 3.9, _H100, ("h100nvl",)
    ),
    GpuSpec(
        "H200",
        _peaks(67, 67, 494.5, 989.5, 1979, None, 1979),
        4.8,
        _H200,
        ("h200sxm", "h200sxm141gb"),
    ),
    GpuSpec("H200-NVL", _peaks(60, 60, 417.5, 835.5, 1670.5, None, 1670.5), 4.8, _H200, ()),
    GpuSpec(
        "H20",
        _peaks(1, 44, 74, 148, 296, None, 296),
        4.0,
        "NVIDIA H20 product brief as published by OEMs (no public NVIDIA datasheet); dense rates",
        (),
    ),
    GpuSpec(
        "L40S",
        _peaks(1.4, 91.6, 183, 362.05, 733, None, 733),
        0.864,
        "NVIDIA L40S datasheet: dense column (fp64 1/64 of fp32)",
        (),
    ),
    GpuSpec(
        "B200",
        _peaks(40, 80, 1100, 2250, 4500, 9000, 4500),
        8.0,
        _BLACKWELL.format("HGX B200, 1000 W"),
        (),
    ),
    GpuSpec(
        "GB200",
        _peaks(45, 90, 1250, 2500, 5000, 10000, 5000),
        8.0,
        _BLACKWELL.format("GB200 NVL72, 1200 W"),
        (),
    ),
    GpuSpec(
        "MI250X",
        _peaks(95.7, 95.7, None, 383, None, None, 383),
        3.2768,
        "AMD Instinct MI250X datasheet: matrix rates",
        ("mi250xmi250",),
    ),
    GpuSpec(
        "MI300X",
        _peaks(163.4, 163.4, 653.7, 1307.4, 2614.9, None, 2614.9),
        5.3,
        "AMD Instinct MI300X datasheet: dense matrix rates",
        ("mi300xvf", "mi300xhf"),
    ),
    GpuSpec(
        "MI325X",
        _peaks(163.4, 163.4, 653.7, 1307.4, 2614.9, None, 2614.9),
        6.0,
        "AMD Instinct MI325X datasheet: dense matrix rates",
        (),
    ),
    GpuSpec(
        "MI355X",
        _peaks(78.6, 157.3, None, 2516.6, 5033.2, 10066.3, 5033.2),
        8.0,
        "AMD Instinct MI355X datasheet: dense matrix rates (fp4: MXFP4)",
        (),
    ),
)


def _key(name: str) -> str:
    """A name as compared: lower case, vendor words and punctuation dropped."""
    text = re.sub(r"\b(nvidia|amd|instinct|tesla|gpu)\b", "", name.lower())
    return re.sub(r"[^a-z0-9]", "", text)


_BY_KEY: dict[str, GpuSpec] = {}
for _spec in TABLE:
    for _alias in (_spec.name, *_spec.aliases):
        _BY_KEY[_key(_alias)] = _spec


def gpu_from_trace(device_name: str) -> GpuSpec | None:
    """The table's GPU a trace names (Kineto deviceProperties, Nsight TARGET_INFO_GPU)."""
    return _BY_KEY.get(_key(device_name))


def _bad_file(path: str, problem: str) -> UsageError:
    return UsageError(f"--gpu-spec {path}: {problem}")


def _load(path: str) -> GpuSpec:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise _bad_file(path, f"cannot read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _bad_file(path, f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise _bad_file(path, "not a JSON object")
    unknown = set(data) - {"name", "peak_tflops", "peak_tb_s", "source"}
    if unknown:
        raise _bad_file(path, f"unknown key(s) {', '.join(sorted(unknown))}")
    name, peaks, tb_s = data.get("name"), data.get("peak_tflops"), data.get("peak_tb_s")
    if not isinstance(name, str) or not name:
        raise _bad_file(path, '"name" must be a non-empty string')
    if not isinstance(peaks, dict) or not peaks:
        raise _bad_file(path, '"peak_tflops" must be an object of dtype: TFLOP/s')
    for dtype, value in peaks.items():
        if dtype not in DTYPES:
            raise _bad_file(path, f"unknown dtype {dtype!r} (dtypes: {', '.join(DTYPES)})")
        if not _positive(value):
            raise _bad_file(path, f'"peak_tflops"."{dtype}" must be a positive number')
    if not isinstance(tb_s, (int, float)) or not _positive(tb_s):
        raise _bad_file(path, '"peak_tb_s" must be a positive number')
    source = data.get("source", path)
    if not isinstance(source, str):
        raise _bad_file(path, '"source" must be a string')
    return GpuSpec(name, {k: float(v) for k, v in peaks.items()}, float(tb_s), source)


def _positive(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def gpu_spec(arg: str) -> GpuSpec:
    """``--gpu-spec NAME|FILE``: a GPU of the table, by its name or a trace's, or a JSON file."""
    if os.path.isfile(arg) or arg.endswith(".json"):
        return _load(arg)
    spec = gpu_from_trace(arg)
    if spec is not None:
        return spec
    names = [s.name for s in TABLE]
    close = difflib.get_close_matches(arg.upper(), names, n=3, cutoff=0.4)
    hint = f"close: {', '.join(close)}; " if close else ""
    raise UsageError(
        f"--gpu-spec {arg!r}: not a known GPU or a JSON file ({hint}known: {', '.join(names)})"
    )
