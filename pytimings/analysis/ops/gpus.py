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
    fp64: float | None,
    fp32: float | None,
    tf32: float | None,
    half: float | None,
    fp8: float | None,
    fp4: float | None,
    int8: float | None,
    *,
    bf16: bool = True,
) -> dict[str, float]:
    """The peaks by dtype; ``half`` is the fp16 rate, and the bf16 one where ``bf16`` (a GPU
    without bf16 tensor cores, before Ampere, has none)."""
    out = {
        "fp64": fp64,
        "fp32": fp32,
        "tf32": tf32,
        "bf16": half if bf16 else None,
        "fp16": half,
        "fp8": fp8,
        "fp4": fp4,
        "int8": int8,
    }
    return {k: v for k, v in out.items() if v is not None}


_V100 = "NVIDIA V100 Tensor Core GPU datasheet (2020): FP64, FP32, Tensor Performance; no bf16"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021): dense rates; bandwidth per model"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet: sparsity rates halved"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet: sparsity rates halved"
_ADA = (
    "NVIDIA Ada GPU architecture whitepaper, appendix A ({}): tensor rates with FP32 "
    "accumulate (what PyTorch's GEMMs use; GeForce runs them at half the FP16-accumulate "
    "rate), sparsity halved; fp64 1/64 of fp32"
)
_ADA_LAPTOP = (
    "NVIDIA GeForce RTX {} Laptop GPU specifications: {} SMs, boost up to {} MHz at the highest "
    "TGP (laptops vary), {}-bit GDDR6 at 18 Gbps; rates are the Ada whitepaper's per-SM rates "
    "(128 FP32, 512 FP16-tensor FLOP/clk with FP32 accumulate) at that clock, an upper bound"
)
_BLACKWELL = (
    "NVIDIA Blackwell datasheets ({}): dense rates per GPU (as tabulated at "
    "glennklockwood.com/garden/processors/B200)"
)

TABLE: tuple[GpuSpec, ...] = (
    GpuSpec(
        "V100-SXM2",
        _peaks(7.8, 15.7, None, 125, None, None, None, bf16=False),
        0.9,
        _V100 + " (V100 for NVLink: 7.8, 15.7, 125 TFLOPS; 900 GB/s)",
        # the DGX Station's V100 is the NVLink module
        ("v100sxm216gb", "v100sxm232gb", "v100sxm2", "v100dgxs32gb", "v100dgxs16gb"),
    ),
    GpuSpec(
        "V100-PCIe",
        _peaks(7, 14, None, 112, None, None, None, bf16=False),
        0.9,
        _V100 + " (V100 for PCIe: 7, 14, 112 TFLOPS; 900 GB/s)",
        ("v100pcie16gb", "v100pcie32gb", "v100pcie"),
    ),
    GpuSpec(
        "V100S-PCIe",
        _peaks(8.2, 16.4, None, 130, None, None, None, bf16=False),
        1.134,
        _V100 + " (V100S for PCIe: 8.2, 16.4, 130 TFLOPS; 1134 GB/s)",
        ("v100spcie32gb", "v100s"),
    ),
    GpuSpec(
        "A100-SXM-40GB",
        _peaks(19.5, 19.5, 156, 312, None, None, 624),
        1.555,
        _A100,
        # PG509-200: the SXM4 40 GB board as Meta's fleet reports it (HTA's traces: 108 SMs,
        # totalGlobalMem 42.5e9 bytes)
        ("a100sxm440gb", "a100sxm4", "a100pg509200"),
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
        "L4",
        _peaks(0.47, 30.3, 60, 121, 242.5, None, 242.5),
        0.3,
        "NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*, FP8/INT8 485* (* sparse, "
        "halved); 300 GB/s; fp64 1/64 of fp32",
        (),
    ),
    GpuSpec(
        "L40",
        _peaks(1.41, 90.5, 90.5, 181.05, 362, None, 362),
        0.864,
        "NVIDIA L40 datasheet: FP32 90.5, TF32 90.5, BF16/FP16 181.05, FP8/INT8 362 (dense "
        "column); 864 GB/s; fp64 1/64 of fp32",
        (),
    ),
    GpuSpec(
        "RTX-4090",
        _peaks(1.29, 82.6, 82.6, 165.2, 330.3, None, 660.6),
        1.008,
        _ADA.format(
            "GeForce RTX 4090: FP32 82.6, TF32 82.6, FP16/BF16 165.2, FP8 330.3, "
            "INT8 660.6; 1008 GB/s"
        ),
        ("geforcertx4090", "rtx4090"),
    ),
    GpuSpec(
        "RTX-4080",
        _peaks(0.76, 48.7, 48.7, 97.5, 194.9, None, 389.9),
        0.7168,
        _ADA.format(
            "GeForce RTX 4080: FP32 48.7, TF32 48.7, FP16/BF16 97.5, FP8 194.9, "
            "INT8 389.9; 716.8 GB/s"
        ),
        ("geforcertx4080", "rtx4080"),
    ),
    GpuSpec(
        "RTX-4090-Laptop",
        _peaks(0.62, 39.7, 39.7, 79.4, 158.8, None, 317.6),
        0.576,
        _ADA_LAPTOP.format("4090", 76, 2040, 256),
        ("geforcertx4090laptop", "rtx4090laptop"),
    ),
    GpuSpec(
        "RTX-4080-Laptop",
        _peaks(0.53, 33.9, 33.9, 67.7, 135.4, None, 270.8),
        0.432,
        _ADA_LAPTOP.format("4080", 58, 2280, 192),
        ("geforcertx4080laptop", "rtx4080laptop"),
    ),
    GpuSpec(
        "B100",
        _peaks(30, 60, 900, 1750, 3500, 7000, 3500),
        8.0,
        _BLACKWELL.format("HGX B100, 700 W"),
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
        # sm_103. int8: the tabulation gives the B200's rate, while NVIDIA cut Blackwell
        # Ultra's int8 tensor rate; no figure is claimed
        "B300",
        _peaks(1.25, 75, 1125, 2250, 4500, 13125, None),
        8.0,
        _BLACKWELL.format("HGX B300, Blackwell Ultra; glennklockwood.com/garden/processors/B300"),
        ("b300sxm6ac", "b300sxm6"),
    ),
    GpuSpec(
        "GB300",
        _peaks(None, None, None, None, 5000, 15300, None),
        8.0,
        "NVIDIA GB300 NVL72 (72 GPUs): 1.1 EF dense FP4, 360 PF dense FP8, 576 TB/s, per GPU "
        "(glennklockwood.com/garden/processors/B300); other dtypes unpublished, none claimed",
        (),
    ),
    GpuSpec(
        "MI210",
        _peaks(45.3, 45.3, None, 181, None, None, 181),
        1.6384,
        "AMD Instinct MI210 datasheet: matrix rates (FP64/FP32 45.3, FP16/BF16/INT8 181); 1.6 TB/s",
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
    text = re.sub(r"\b(nvidia|amd|instinct|tesla|geforce|gpu)\b", "", name.lower())
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
