"""The patches ``pytimings record`` puts into torch, without importing torch itself.

:func:`install` registers an import hook (a ``sys.meta_path`` finder) that applies the
patches right after ``torch`` (and, for collectives, ``torch.distributed``) has finished
importing, so a process that never imports torch never loads it, and the program sees the
patched functions from its first ``import torch`` on (``from torch.distributed import
all_reduce`` included). If torch is already imported, they are applied at once.

* ``comm``: :func:`pytimings.instrument_torch_distributed` (collectives and P2P as ``comm``
  regions with bytes and the group size, so summaries show algbw/busbw).
* ``copies``: ``Tensor.to``, ``Tensor.copy_``, ``Tensor.cuda`` and ``Tensor.cpu`` calls that
  cross host and device become ``memory`` regions named ``memcpy.HtoD``/``memcpy.DtoH``
  with the source tensor's bytes, GPU-timed on the device side's current stream. Calls that
  stay on one side (CPU to CPU, a dtype change, device to device) are not recorded.
* ``modules``: the forward (``Module.__call__``) of every ``torch.nn.Module`` whose qualified
  class name (``module.QualName``) matches one of the comma-separated fnmatch patterns
  becomes a ``compute`` region (an NVTX range too), GPU-timed on the current stream when
  CUDA is initialised. A region is named by the instance's module path under the outermost
  module whose forward called it, that module's class first (``ToyModel.layers.0``, as
  ``named_modules()`` spells it: the four layers of a model are four names), else, called
  from no module's forward, by its class's qualname (:func:`module_path`). With ``capture``
  (``--kineto``), the forwards of its step name (the class's qualname) also drive the
  torch.profiler capture, and while it runs each is a ``record_function`` annotation of that
  name: the trace carries its steps (``analyze TRACE --by NAME``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.abc
import importlib.machinery
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pytimings.record.kineto import StepCapture

# device types on the far side of a host<->device copy ("cpu" is the host)
DEVICE_TYPES = frozenset({"cuda", "xpu", "mps", "hpu", "mtia", "privateuseone"})
HOST = "cpu"


@dataclass(frozen=True)
class Patches:
    comm: bool = True
    copies: bool = False
    modules: str | None = None  # comma-separated fnmatch patterns
    capture: StepCapture | None = None  # --kineto: steps counted by a module region's name


def install(patches: Patches) -> None:
    """Apply ``patches`` once torch is imported (now if it already is)."""
    after: dict[str, list[Callable[[ModuleType], None]]] = {}
    if patches.comm:
        after.setdefault("torch.distributed", []).append(lambda _: _instrument_comm())
    if patches.copies:
        after.setdefault("torch", []).append(lambda torch: patch_copies(torch))
    if patches.modules:
        pats = [p.strip() for p in patches.modules.split(",") if p.strip()]
        after.setdefault("torch", []).append(
            lambda torch: patch_modules(torch, pats, patches.capture)
        )
    pending = {}
    for name, callbacks in after.items():
        module = sys.modules.get(name)
        if module is not None:
            for cb in callbacks:
                cb(module)
        else:
            pending[name] = callbacks
    if pending:
        sys.meta_path.insert(0, _AfterImport(pending))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks after a module named in ``callbacks`` has executed (once each)."""

    def __init__(self, callbacks: dict[str, list[Callable[[ModuleType], None]]]) -> None:
        self._callbacks = callbacks
        self._lock = threading.Lock()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._callbacks:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        with self._lock:
            callbacks = self._callbacks.pop(fullname, [])
        if not self._callbacks and self in sys.meta_path:
            sys.meta_path.remove(self)
        exec_module = loader.exec_module

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            for cb in callbacks:
                cb(module)

        loader.exec_module = exec_then_patch  # this spec's own loader instance
        return spec


def _instrument_comm() -> None:
    from pytimings.record.distributed import instrument_torch_distributed

    instrument_torch_distributed()


# -- copies ----------------------------------------------------------------------------------


def copy_direction(src: str, dst: str) -> str | None:
    """``"HtoD"``/``"DtoH"`` for a copy between these device types, else None."""
    if src == HOST and dst in DEVICE_TYPES:
        return "HtoD"
    if src in DEVICE_TYPES and dst == HOST:
        return "DtoH"
    return None


def _to_target(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The device ``Tensor.to(*args, **kwargs)`` moves a tensor to (None: no device given)."""
    dev = kwargs.get("device")
    if dev is None:
        for a in args:
            if isinstance(a, torch.Tensor):
                return a.device
            if isinstance(a, str | torch.device | int) and not isinstance(a, bool):
                dev = a
                break
    if dev is None:
        return None
    return torch.device("cuda", dev) if isinstance(dev, int) else torch.device(dev)


def _copy_region(torch: Any, direction: str, src: Any, device_side: Any) -> Any:
    from pytimings.record.recorder import region

    stream = None
    if getattr(device_side, "type", None) == "cuda" and torch.cuda.is_available():
        stream = torch.cuda.current_stream(device_side)
    return region(f"memcpy.{direction}", kind="memory", stream=stream, nbytes=int(src.nbytes))


def patch_copies(torch: Any) -> None:
    """Wrap ``Tensor.to/copy_/cuda/cpu`` (see the module docstring); idempotent."""
    tensor = torch.Tensor
    if getattr(tensor, "_pytimings_copies", False):
        return
    orig_to, orig_copy, orig_cuda, orig_cpu = tensor.to, tensor.copy_, tensor.cuda, tensor.cpu

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        dst = _to_target(torch, args, kwargs)
        direction = None if dst is None else copy_direction(self.device.type, dst.type)
        if direction is None:
            return orig_to(self, *args, **kwargs)
        side = self.device if direction == "DtoH" else dst
        with _copy_region(torch, direction, self, side):
            return orig_to(self, *args, **kwargs)

    def copy_(self: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
        direction = copy_direction(src.device.type, self.device.type)
        if direction is None:
            return orig_copy(self, src, *args, **kwargs)
        side = self.device if direction == "HtoD" else src.device
        with _copy_region(torch, direction, src, side):
            return orig_copy(self, src, *args, **kwargs)

    def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
        if copy_direction(self.device.type, "cuda") is None:
            return orig_cuda(self, *args, **kwargs)
        device = {"device": kwargs["device"]} if "device" in kwargs else {}
        side = _to_target(torch, args[:1], device) or torch.device("cuda")
        with _copy_region(torch, "HtoD", self, side):
            return orig_cuda(self, *args, **kwargs)

    def cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        if copy_direction(self.device.type, HOST) is None:
            return orig_cpu(self, *args, **kwargs)
        with _copy_region(torch, "DtoH", self, self.device):
            return orig_cpu(self, *args, **kwargs)

    for name, fn, orig in (
        ("to", to, orig_to),
        ("copy_", copy_, orig_copy),
        ("cuda", cuda, orig_cuda),
        ("cpu", cpu, orig_cpu),
    ):
        fn.__name__, fn.__qualname__, fn.__doc__ = orig.__name__, f"Tensor.{name}", orig.__doc__
        setattr(tensor, name, fn)
    tensor._pytimings_copies = True


# -- modules ---------------------------------------------------------------------------------


def class_matches(cls: type, patterns: Sequence[str]) -> bool:
    qualified = f"{cls.__module__}.{cls.__qualname__}"
    return any(fnmatch.fnmatchcase(qualified, p) for p in patterns)


def module_path(torch: Any, instance: Any, frame: Any) -> str:
    """``instance``'s name under the outermost ``nn.Module`` whose forward is on the stack
    from ``frame`` up and holds it (``ToyModel.layers.0``), else its class's qualname."""
    path = None
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module) and owner is not instance:
            name = next((n for n, m in owner.named_modules() if m is instance), None)
            if name is not None:
                path = f"{type(owner).__name__}.{name}"
        frame = frame.f_back
    return path if path is not None else type(instance).__qualname__


def _step_annotation(torch: Any, name: str) -> Any:
    """While torch.profiler runs (a --kineto step): the step as a ``record_function``
    annotation, so the trace carries its steps (``analyze --by NAME`` on it); else nothing."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(name)
    return contextlib.nullcontext()


def patch_modules(torch: Any, patterns: Sequence[str], capture: StepCapture | None = None) -> None:
    """Time the forward of matching ``nn.Module`` classes (module docstring); idempotent.
    ``capture`` counts the forwards of its step name (pytimings.record.kineto)."""
    from pytimings.record.recorder import region

    module_cls = torch.nn.Module
    if getattr(module_cls, "_pytimings_modules", False):
        return
    orig_call = module_cls.__call__
    matched: dict[type, bool] = {}  # class -> whether a pattern matches it
    paths: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # region names

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        cls = type(self)
        hit = matched.get(cls)
        if hit is None:
            hit = matched[cls] = class_matches(cls, patterns)
        if not hit:
            return orig_call(self, *args, **kwargs)
        name = paths.get(self)
        if name is None:
            name = paths[self] = module_path(torch, self, sys._getframe(1))
        cuda = torch.cuda.is_initialized()
        stream = torch.cuda.current_stream() if cuda else None
        step = cls.__qualname__
        if capture is None or step != capture.steps.name:
            with region(name, kind="compute", stream=stream):
                return orig_call(self, *args, **kwargs)
        capture.enter()
        try:
            with region(name, kind="compute", stream=stream), _step_annotation(torch, step):
                return orig_call(self, *args, **kwargs)
        finally:
            capture.exit()

    module_cls.__call__ = __call__
    module_cls._pytimings_modules = True
