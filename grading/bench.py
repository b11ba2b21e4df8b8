"""The old name of the layer benchmark: `python -m grading.bench` runs bench.layers as a program
(the name stays for scripts that call it; the grader's code does not use the benchmarks')."""
import runpy

if __name__ == "__main__":
    runpy.run_module("bench.layers", run_name="__main__", alter_sys=True)
