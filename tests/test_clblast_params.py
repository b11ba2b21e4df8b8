"""CLBlast's tuned parameters: files applied with OverrideParameters (all or nothing, bad
entries named), products still correct under them, OCLF_CLBLAST_PARAMS, and the tuning
tool's parsing of tuner output."""
import json
import os

import pytest
import torch

from bench import clblast_tune

# Valid, non-default configurations (from CLBlast's tuners on PoCL).
XGEMM = {"GEMMK": 0, "KREG": 1, "KWG": 32, "KWI": 2, "MDIMA": 8, "MDIMC": 8, "MWG": 16, "NDIMB": 8, "NDIMC": 8,
         "NWG": 32, "SA": 1, "SB": 1, "STRM": 0, "STRN": 0, "VWM": 2, "VWN": 1}
XGEMM_DIRECT = {"KWID": 2, "MDIMAD": 8, "MDIMCD": 8, "NDIMBD": 8, "NDIMCD": 8, "PADA": 1, "PADB": 1, "VWMD": 2,
                "VWND": 2, "WGD": 32}
XGEMV = {"WGS1": 32, "WPT1": 1}
KERNELS = ("Xgemm", "XgemmDirect", "Xgemv", "GemmRoutine")


def write(path, kernels):
    path.write_text(json.dumps({"device": "test", "kernels": kernels}))
    return str(path)


def check_matmul(ocl, m, k, n, b_transposed=False):
    torch.manual_seed(0)
    a = torch.randn(m, k)
    b = torch.randn(n, k).t() if b_transposed else torch.randn(k, n)
    ref = a @ b
    torch.testing.assert_close(ocl.ocl_matmul(a, b), ref, atol=1e-4, rtol=1e-4)


def test_valid_file_applies_and_products_stay_correct(ocl, tmp_path):
    before = ocl.clblast_parameters(KERNELS)
    for indirect_from in (0, 1 << 20):  # every GEMM indirect (Xgemm), then every one direct
        path = write(tmp_path / "p.json", {"Xgemm": XGEMM, "XgemmDirect": XGEMM_DIRECT, "Xgemv": XGEMV,
                                           "GemmRoutine": {"XGEMM_MIN_INDIRECT_SIZE": indirect_from}})
        previous = ocl.apply_clblast_params(path)
        try:
            now = ocl.clblast_parameters(KERNELS)
            assert now["Xgemm"] == XGEMM and now["XgemmDirect"] == XGEMM_DIRECT and now["Xgemv"] == XGEMV
            for m, k, n in ((1, 37, 21), (20, 768, 2304), (33, 7, 9)):
                check_matmul(ocl, m, k, n)
                check_matmul(ocl, m, k, n, b_transposed=True)
        finally:
            ocl.set_clblast_parameters(previous)
    assert ocl.clblast_parameters(KERNELS) == before


@pytest.mark.parametrize("kernels, named", [
    ({"XgemmDirect": XGEMM_DIRECT, "Xgemm": {k: v for k, v in XGEMM.items() if k != "KWG"}}, "'Xgemm'.*'KWG'"),
    ({"XgemmDirect": XGEMM_DIRECT, "Xgemm": dict(XGEMM, BOGUS=1)}, "'Xgemm'.*'BOGUS'"),
    ({"XgemmDirect": XGEMM_DIRECT, "Xgem": XGEMM}, "'Xgem'"),
    ({"Xgemv": {"WGS1": -1, "WPT1": 1}}, "'Xgemv'"),
])
def test_bad_entry_names_file_and_kernel_and_changes_nothing(ocl, tmp_path, kernels, named):
    before = ocl.clblast_parameters(KERNELS)
    path = write(tmp_path / "bad.json", kernels)
    with pytest.raises(ValueError, match=f"bad.json.*{named}"):
        ocl.apply_clblast_params(path)
    assert ocl.clblast_parameters(KERNELS) == before


def test_unreadable_file_is_named(ocl, tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        ocl.apply_clblast_params(str(tmp_path / "broken.json"))
    with pytest.raises(ValueError, match="missing.json"):
        ocl.apply_clblast_params(str(tmp_path / "missing.json"))


def test_environment_picks_or_skips_the_file(ocl, tmp_path, monkeypatch):
    before = ocl.clblast_parameters(KERNELS)
    bad = write(tmp_path / "bad.json", {"Xgemm": {"KWG": 32}})
    monkeypatch.setattr(ocl.clblast_params, "_clblast_params_loaded", False)  # as in a fresh process
    monkeypatch.setattr(ocl.clblast_params, "_clblast_params_path", None)
    monkeypatch.setenv("OCLF_CLBLAST_PARAMS", bad)
    assert ocl.clblast_params_file() == bad
    with pytest.raises(ValueError, match="bad.json.*'Xgemm'"):
        ocl.ocl_matmul(torch.randn(3, 4), torch.randn(4, 5))
    monkeypatch.setenv("OCLF_CLBLAST_PARAMS", "0")
    assert ocl.clblast_params_file() is None
    check_matmul(ocl, 3, 4, 5)
    assert ocl.load_clblast_params() is None
    assert ocl.clblast_parameters(KERNELS) == before


def test_device_file_name(ocl, monkeypatch):
    assert ocl.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert ocl.device_slug("pthread-skylake-avx512-AMD EPYC") == "pthread-skylake-avx512-amd-epyc"
    monkeypatch.delenv("OCLF_CLBLAST_PARAMS", raising=False)
    path = os.path.join(ocl.CLBLAST_PARAMS_DIR, ocl.device_slug(ocl.device_info()["device"]) + ".json")
    assert ocl.clblast_params_file() == (path if os.path.exists(path) else None)


def test_tool_keeps_the_fastest_result_per_kernel(tmp_path):
    def tuner_file(family, kernel, results):
        data = {"kernel_family": family, "precision": "32", "best_kernel": kernel,
                "results": [{"kernel": kernel, "time": t, "parameters": dict(p, PRECISION=32)} for t, p in results]}
        (tmp_path / f"clblast_{family}_32.json").write_text(json.dumps(data))

    tuner_file("xgemm_1", "Xgemm", [(3.0, dict(XGEMM, MWG=64)), (2.0, XGEMM)])
    tuner_file("xgemm_2", "Xgemm", [(2.5, dict(XGEMM, MWG=128))])
    tuner_file("xgemm_direct_2", "XgemmDirectTN", [(1.0, XGEMM_DIRECT)])
    copy = {"COPY_DIMX": 16, "COPY_DIMY": 8, "COPY_VW": 4, "COPY_WPT": 2}
    tuner_file("copy", "Copy", [(0.5, copy)])
    params, times = clblast_tune.best_parameters(str(tmp_path))
    assert params == {"Xgemm": XGEMM, "XgemmDirect": XGEMM_DIRECT, "Copy": copy}
    assert times == {"Xgemm": 2.0, "XgemmDirect": 1.0, "Copy": 0.5}


def test_tool_says_how_to_install_missing_tuners(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="apt-get install clblast-utils"):
        clblast_tune.run_tuners(str(tmp_path), 0, 0, 1.0)


def test_tool_reads_a_stopped_tuners_log(tmp_path):
    ok, bad = "\x1b[32mresults match\x1b[0m", "\x1b[31mL2 error 1.00e+00\x1b[0m"
    head = "|      64       1 |    512       1 |   OK    120 ms |"  # local, global, compile time
    log = tmp_path / "clblast_tuner_xgemm_direct.log"
    names = "WGD MDIMCD NDIMCD MDIMAD NDIMBD KWID VWMD VWND PADA PADB"

    def row(i, values, ms, status):
        cells = " ".join(f"{v:>4}" for v in values)
        return f"|    {i} |    30 | {cells} {head}      {ms} ms |    2.1 | {status} |\n"

    log.write_text(
        f"* Parameters explored: {names} \n" + row(1, [8, 8, 8, 8, 8, 2, 1, 1, 1, 1], "4.02", ok)
        + f"* Parameters explored: {names} \n" + row(1, [16, 8, 8, 8, 8, 2, 1, 1, 1, 1], "0.90", ok)
        + row(2, [32, 8, 8, 8, 8, 2, 1, 1, 1, 1], "0.70", bad) + row(3, [32, 8, 8, 8, 8, 2, 2, 2, 1, 1], "0.80", ok)
        + "|    4 |    30 |   16    8    8 |      16       1 |    128       1 |   OK 9000 ms |")
    tuner = next(t for t in clblast_tune.TUNERS if t.binary == "clblast_tuner_xgemm_direct")
    assert clblast_tune.results_from_log(str(log), tuner, str(tmp_path)) == 2
    params, times = clblast_tune.best_parameters(str(tmp_path))
    assert params == {"XgemmDirect": dict(zip(names.split(), [32, 8, 8, 8, 8, 2, 2, 2, 1, 1]))}
    assert times == {"XgemmDirect": 0.8}


@pytest.mark.parametrize("k,n", [(3072, 768), (768, 2304), (37, 21), (2048, 1000)])
def test_one_row_products_with_the_device_file(ocl, k, n):
    """One-row products (CLBlast's GEMV) with whatever parameter file the device has: a
    GEMV entry tuned at one size once failed at 1×3072·3072×768."""
    torch.manual_seed(0)
    a, w = torch.randn(1, k), torch.randn(n, k)
    for b in (w.t(), w.t().contiguous()):
        torch.testing.assert_close(ocl.ocl_matmul(a, b), a @ b, atol=1e-3, rtol=1e-4)
