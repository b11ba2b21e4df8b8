#!/usr/bin/env bash
# One-time setup for a fresh machine, shared by the Makefile, .ci/run and the Dockerfile:
#   1. Debian/Ubuntu packages: an OpenCL driver (PoCL), the ICD loader, headers, CLBlast,
#      Oclgrind (make check) and binutils (nm, for the allowed-calls check);
#   2. a virtual environment in .venv with requirements.txt installed.
# BEGIN STAFF
# As root, it makes the account "oclf-sandbox" too, that the grader runs students' code as.
# END STAFF
# Building the extension is the Makefile's job (make build).
# Without root and with packages missing, it stops and prints the command to run.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(pocl-opencl-icd ocl-icd-opencl-dev opencl-headers libclblast-dev clinfo oclgrind binutils)
VENV=${VENV:-.venv}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
python3 -c "import ensurepip, venv" 2>/dev/null || missing+=(python3-venv)
python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()['include'] + '/Python.h'))" \
  || missing+=(python3-dev)

if ((${#missing[@]})); then
  cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    echo "setup: installing system packages with sudo: ${missing[*]}"
    sudo -n sh -c "$cmd"
  else
    echo "setup: missing system packages: ${missing[*]}" >&2
    echo "setup: run this as root, then run make again:" >&2
    echo "    sudo sh -c '$cmd'" >&2
    exit 1
  fi
fi

# BEGIN STAFF
# The grader's sandbox account (grading/sandbox.py); never "nobody", which other services share.
if [ "$(id -u)" = 0 ] && ! id oclf-sandbox >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin oclf-sandbox
fi
# END STAFF

stamp="$VENV/.requirements"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  python3 -m venv "$VENV"
fi
if ! cmp -s requirements.txt "$stamp"; then
  echo "setup: installing Python packages (torch and friends take a minute or two)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r requirements.txt
  cp requirements.txt "$stamp"
fi
# The project itself, installed editable: Python imports its packages from this tree. No
# compiling here: make build builds the module in place.
# BEGIN STAFF
# Torch finds the device's entry point (torch_opencl_autoload) as after a pip install; make
# device builds the device's module.
# END STAFF
editable="$VENV/.editable"
installed() { "$VENV/bin/python" -c "import importlib.metadata as m; m.distribution('opencl_functions')" 2>/dev/null; }
if ! cat setup.py pyproject.toml | cmp -s - "$editable" || ! installed; then
  echo "setup: installing this tree into $VENV (editable)"
  out=$(OCLF_BUILD_EXTENSIONS=0 "$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps -e . 2>&1) \
    || { echo "$out" >&2; exit 1; }
  cat setup.py pyproject.toml > "$editable"
fi
touch "$stamp"
echo "setup: done ($("$VENV/bin/python" --version), $(clinfo -l 2>/dev/null | grep -c Device || true) OpenCL device(s))"
