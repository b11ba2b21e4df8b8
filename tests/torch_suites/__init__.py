"""torch's device-generic test suites (TestCommon, TestModule, TestOptim, Inductor's OpInfo
tests) written anew on torch.testing._internal's machinery and databases, run on the opencl
device: common.py says how; extras/validation/torch_suites.py runs them and writes the table."""
