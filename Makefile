# opencl_functions: OpenCL layers under PyTorch. `make` lists the targets.
# Every target sets up what it needs first (system packages, .venv, the build).
PY      := .venv/bin/python
SOURCES := setup.py $(wildcard opencl_functions/*.cpp opencl_functions/*.hpp)
BUILT   := build/.core-built

.PHONY: help setup build run test test-slow info sanity resnet gpt bird bird-model bench handout autograder clean

help:
	@echo "make run         set up, build, run the student checks (tests.py)"
	@echo "make test        set up, build, run the whole test suite (what CI runs)"
	@echo "make test-slow   the opt-in slow checks too"
	@echo "make info        list OpenCL platforms and devices, and the selected one"
	@echo "make sanity | resnet | gpt | bird   the demos"
	@echo "make bench       conv2d and matmul benchmark (grading.bench)"
	@echo "make handout | autograder           staff: student tree, Gradescope zip"
	@echo "make clean       remove build outputs (keeps .venv)"
	@echo "Pick a device with OCL_DEVICE=P:D or part of its name (see make info)."

.venv/.requirements: requirements.txt scripts/setup.sh
	bash scripts/setup.sh

setup: .venv/.requirements

$(BUILT): .venv/.requirements $(SOURCES)
	$(PY) setup.py -q build_ext --inplace
	@touch $@

build: $(BUILT)

run: build
	$(PY) -m pytest tests.py

test: build
	$(PY) -m pytest

test-slow: build
	$(PY) -m pytest -m "slow or not slow"

info: build
	$(PY) -m utils.info

handout: .venv/.requirements
	$(PY) -m grading.handout --out build/handout

autograder: .venv/.requirements
	$(PY) -m grading.autograder --out build/autograder.zip

clean:
	rm -rf build opencl_functions/_core*.so
