# opencl_functions: OpenCL layers under PyTorch. `make` lists the targets.
# Every target sets up what it needs first (system packages, .venv, the build).
PY      := .venv/bin/python
SOURCES := setup.py $(wildcard opencl_functions/*.cpp opencl_functions/*.hpp opencl_functions/runtime/* \
             opencl_functions/launch/*)
BUILT   := build/.core-built
# BEGIN STAFF
# The reference's host code (opencl_functions/reference/, staff-only) compiles into the module too.
SOURCES += $(wildcard opencl_functions/reference/*.hpp)
# The opencl torch device (torch_opencl), built against torch's C++ headers:
# `make run` does not need it; `make test` builds it (ninja from .venv rebuilds only what changed).
DEVICE_SOURCES := setup_device.py $(wildcard opencl_functions/runtime/* opencl_functions/launch/* \
                  opencl_functions/reference/*.hpp torch_opencl/csrc/*.cpp \
                  torch_opencl/csrc/*/*.cpp torch_opencl/csrc/*/*.h)
DEVICE_BUILT   := build/.device-built
TEST_NEEDS     := device
# END STAFF

.PHONY: help setup build device run check grade test test-slow info sanity resnet gpt bird bird-model networks bench \
        clblast-tune wheel clean
# BEGIN STAFF
.PHONY: calibrate handout autograder accuracy torch-suites programs perf-tables
# END STAFF

help:
	@echo "make run         set up, build, run the student checks (tests.py)"
	@echo "make check       your kernel under Oclgrind: data races and out-of-bounds accesses"
	@echo "make grade       estimate your performance points: your conv2d on the graded layers vs naive and torch"
	@echo "make test        set up, build, run the whole test suite (what CI runs)"
# BEGIN STAFF
	@echo "make device      build the opencl torch device (torch_opencl)"
# END STAFF
	@echo "make test-slow   the opt-in slow checks too"
	@echo "make info        list OpenCL platforms and devices, and the selected one"
	@echo "make sanity | resnet | gpt | bird   the demos (options: ARGS=\"--quick --device nvidia\")"
	@echo "make bird-model  retrain the shipped bird-song ResNet (extras/train_audio.py)"
	@echo "make networks    forward+backward check of 20 torchvision networks (extras/validation/networks.py)"
	@echo "make bench       conv2d and matmul benchmark (bench.layers)"
	@echo "make clblast-tune  tune CLBlast's matrix products for this device (needs clblast-utils; ARGS=\"--scale 2\")"
# BEGIN STAFF
	@echo "make calibrate   staff: time the grader's ladder of kernels here and print the scale"
	@echo "make torch-suites  staff: torch's device-generic suites (tests/torch_suites) over the whole"
	@echo "                 op_db, module_db and optim_db on the device; the table into docs/TORCH_SUITES.md"
	@echo "make tune        staff: sweep the reference's kernels over ResNet-50, MobileNet and GPT-2 shapes"
	@echo "                 on this device into the tuning cache (bench.tune; ARGS=\"--models gpt2\")"
	@echo "make handout | autograder           staff: student tree, Gradescope zip"
	@echo "make accuracy    staff: the device's float32 error against float64 beside torch's, every op_db"
	@echo "                 and module_db sample (extras/validation/accuracy.py; ARGS=\"--ops sum -v\")"
	@echo "make perf-tables staff: the benchmarks against torch (CUDA where present) into out/perf, then"
	@echo "                 docs/PERFORMANCE.md's tables (bench.report; ARGS=\"--suite micro\", default all)"
	@echo "make programs SRC=DIR  staff: public programs (pytorch/examples) run on the device from a checkout"
	@echo "                 of theirs, a table of what passed (tests/programs/run.py; ARGS=\"--only mnist\"). Fetch them:"
	@echo "                 git clone --filter=blob:none --sparse https://github.com/pytorch/examples .clients/pytorch-examples"
	@echo "                 git -C .clients/pytorch-examples sparse-checkout set word_language_model dcgan mnist imagenet distributed/minGPT-ddp"
# END STAFF
	@echo "make wheel       a wheel of the package into dist/, built against .venv's torch (pip install dist/*.whl)"
	@echo "make clean       remove build outputs (keeps .venv)"
	@echo "Pick a device with OCL_DEVICE=P:D or part of its name (see make info)."

.venv/.requirements: requirements.txt scripts/setup.sh setup.py pyproject.toml
	bash scripts/setup.sh

setup: .venv/.requirements

$(BUILT): .venv/.requirements $(SOURCES)
	$(PY) setup.py -q build_ext --inplace
	@touch $@

build: $(BUILT)

# BEGIN STAFF
$(DEVICE_BUILT): $(BUILT) $(DEVICE_SOURCES)
	PATH="$(CURDIR)/.venv/bin:$$PATH" $(PY) setup_device.py -q build_ext --inplace
	@touch $@

device: $(DEVICE_BUILT)

# END STAFF
# The allowed-calls check first (what the grader's build step checks), then the tests.
run: build
	$(PY) -m grading.symbols
	$(PY) -m pytest tests.py --tb=line

check: build
	$(PY) -m grading.symbols
	$(PY) -m grading.check

grade: build
	$(PY) -m bench.estimate $(ARGS)

# The suite runs in TEST_WORKERS processes (pytest-xdist); a plain `pytest` runs it in one.
# BEGIN STAFF
# Then the tests marked serial run one at a time: the grader's, whose sandbox account's
# processes and timed runs need the machine alone.
# END STAFF
TEST_WORKERS ?= 2

test: build $(TEST_NEEDS)
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not slow and not serial"
# BEGIN STAFF
	$(PY) -m pytest -m "not slow and serial"
# END STAFF

test-slow: build $(TEST_NEEDS)
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not serial"
# BEGIN STAFF
	$(PY) -m pytest -m serial
# END STAFF

bench: build
	$(PY) -m bench.layers --out out/bench

# Runs CLBlast's tuners at the lowest priority; writes opencl_functions/clblast_params/<device>.json.
clblast-tune: build
	nice -n 19 $(PY) -m bench.clblast_tune $(ARGS)

# BEGIN STAFF
calibrate: build
	$(PY) -m grading.calibrate --tiers bench/tiers.json $(ARGS)

# Every candidate of every layer shape measured once (OCLF_TUNE=sweep), the winners cached
# per device under ~/.cache/opencl_functions; later runs read them.
.PHONY: tune
tune: build
	$(PY) -m bench.tune $(ARGS)
# END STAFF

info: build
	$(PY) -m opencl_functions.info

# The demos; pass options with ARGS, e.g. make resnet ARGS="--arch resnet50 --device nvidia".
sanity: build
	$(PY) simple_sanity_check.py $(ARGS)

resnet: build
	$(PY) inference_resnet.py $(ARGS)

gpt: build
	$(PY) inference_gpt2.py $(ARGS)

BIRD_MODEL := extras/models/birdsong_resnet.pt
BIRD_TRAIN := $(PY) -m extras.train_audio --checkpoint $(BIRD_MODEL) --plot out/birdsong_curves.png

bird-model: build
	$(BIRD_TRAIN)

bird: build
	@test -f $(BIRD_MODEL) || $(BIRD_TRAIN)
	$(PY) inference_bird.py $(ARGS)

networks: build
	$(PY) -m extras.validation.networks $(ARGS)

# BEGIN STAFF
accuracy: build $(TEST_NEEDS)
	$(PY) -m extras.validation.accuracy $(or $(ARGS),--all)

# Public programs from a checkout outside the tree (fetched into .clients/, see tests/programs/README.md);
# without SRC it prints how to fetch one.
programs: build $(TEST_NEEDS)
	$(PY) tests/programs/run.py $(if $(SRC),--src $(SRC)) $(ARGS)

# torch's TestCommon, TestModule, TestOptim and Inductor OpInfo checks on the opencl device over
# the whole databases (hours on a 2-core CPU; make test runs their pinned fast subset);
# ARGS="--files test_optim.py" runs some of them.
torch-suites: build $(TEST_NEEDS)
	nice $(PY) -m extras.validation.torch_suites --scope full --doc $(ARGS)

# The benchmarks' suites (bench.report: micro, layers, models, models16, compile, llama) recorded into
# out/perf, then rendered into docs/PERFORMANCE.md; ARGS="--suite micro --budget 560" runs some.
perf-tables: build $(TEST_NEEDS)
	$(PY) -m bench.report $(or $(ARGS),--suite all)

handout: .venv/.requirements
	$(PY) -m grading.handout --out build/handout

autograder: .venv/.requirements
	$(PY) -m grading.autograder --out build/autograder.zip
# END STAFF

# The installable package (README.md: Install as a package) into $(DIST). --no-build-isolation:
# the device compiles against the torch it will run with; ninja from .venv compiles in
# parallel. Objects in build/package are reused; the files staged for the last wheel are not.
DIST := dist
wheel: .venv/.requirements
	rm -rf build/package/lib.*
	PATH="$(CURDIR)/.venv/bin:$$PATH" $(PY) -m pip wheel --no-build-isolation --no-deps -w $(DIST) .

clean:
	rm -rf build dist opencl_functions/_core*.so
# BEGIN STAFF
	rm -rf torch_opencl/_C*.so
# END STAFF
