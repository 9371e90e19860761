import numpy as np
import numpy.typing as npt

_I64 = npt.NDArray[np.int64]

__test__: dict[str, str]  # added by Cython

def replay(
    order: _I64,
    end0: _I64,
    dur: _I64,
    lat: _I64,
    pred: _I64,
    pred_end_fixed: _I64,
    dep: _I64,
    dep_end_fixed: _I64,
    dep_lat: _I64,
    launch_ready: _I64,
    launch_sync: _I64,
    start_fixed: _I64,
    s_start_w: _I64,
    s_end_w: _I64,
    s_prev: _I64,
    s_wait: _I64,
    s_wait_end_fixed: _I64,
    s_tail: _I64,
    c_inst: _I64,
    c_off: _I64,
    c_excess: _I64,
    c_transfer: _I64,
    inst_fixed: _I64,
) -> tuple[_I64, _I64, npt.NDArray[np.int8], _I64, _I64]: ...
