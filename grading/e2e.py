"""The old name of the whole-model benchmark: `python -m grading.e2e` runs bench.models as a
program (the name stays for scripts that call it; the grader's code does not use the benchmarks')."""
import runpy

if __name__ == "__main__":
    runpy.run_module("bench.models", run_name="__main__", alter_sys=True)
