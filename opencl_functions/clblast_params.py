"""CLBlast's tuning parameters per device: the files clblast_params/<device slug>.json
(written by `python -m bench.clblast_tune`), applied before the first product; the
OCLF_CLBLAST_PARAMS setting turns them off ("0") or picks another file (a path).
"""
from __future__ import annotations

import json
import os
import re
from typing import Dict, Iterable, Mapping, Optional

from . import settings

from . import _core

# CLBlast's tuning parameters: {kernel: {parameter: value}}, kernel names as CLBlast's
# database spells them ("Xgemm", "XgemmDirect", "GemmRoutine", "Xgemv", "Copy", ...).
KernelParams = Dict[str, Dict[str, int]]

CLBLAST_PARAMS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clblast_params")


def device_slug(name: str) -> str:
    """A file name for a device name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def clblast_params_file() -> Optional[str]:
    """The CLBlast parameter file for the selected device: OCLF_CLBLAST_PARAMS if set
    (None when it is "0"), else clblast_params/<device slug>.json where it exists."""
    env = settings.get("CLBLAST_PARAMS")
    if env:
        return None if env == "0" else env
    path = os.path.join(CLBLAST_PARAMS_DIR, device_slug(_core.device_info()["device"]) + ".json")
    return path if os.path.exists(path) else None


def read_clblast_params(path: str) -> KernelParams:
    """The "kernels" table of a parameter file: {kernel: {parameter: value}}."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the CLBlast parameter file {path}: {err}") from None
    kernels = data.get("kernels") if isinstance(data, dict) else None
    if not isinstance(kernels, dict):
        raise ValueError(f"{path}: expected a JSON object with a 'kernels' object")
    for kernel, params in kernels.items():
        if not isinstance(params, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in params.values()
        ):
            raise ValueError(f"{path}: kernel '{kernel}' must map parameter names to non-negative ints, "
                             f"got {params!r}")
    return kernels


def clblast_parameters(kernels: Iterable[str]) -> KernelParams:
    """CLBlast's current parameters of the named kernels (its database's, or the last override)."""
    return {kernel: _core.clblast_parameters(kernel) for kernel in kernels}


def set_clblast_parameters(params: Mapping[str, Mapping[str, int]]) -> KernelParams:
    """Applies {kernel: {parameter: value}}, each entry complete, for the selected device;
    returns the parameters it replaced (pass them back to restore). A bad entry raises
    ValueError naming the kernel and changes nothing."""
    previous = clblast_parameters(params)
    _core.clblast_override({kernel: dict(values) for kernel, values in params.items()})
    return previous


def apply_clblast_params(path: str) -> KernelParams:
    """Applies a parameter file; returns the parameters it replaced. A bad file raises
    ValueError naming the file and the kernel, and changes nothing."""
    kernels = read_clblast_params(path)
    try:
        return set_clblast_parameters(kernels)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


_clblast_params_loaded = False
_clblast_params_path: Optional[str] = None


def load_clblast_params() -> Optional[str]:
    """Applies clblast_params_file() once per process (ocl_matmul calls this before its
    first product); returns the file applied, or None."""
    global _clblast_params_loaded, _clblast_params_path
    if not _clblast_params_loaded:
        path = clblast_params_file()
        if path is not None:
            apply_clblast_params(path)
        _clblast_params_loaded, _clblast_params_path = True, path
    return _clblast_params_path
