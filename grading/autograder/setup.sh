#!/usr/bin/env bash
# Gradescope setup for the opencl_functions autograder (Ubuntu 22.04 base image, as root).
# Gradescope unzips autograder.zip into /autograder/source and runs this once when it
# builds the image: system packages and the Python environment through the project's own
# scripts/setup.sh (PoCL from apt), a sandbox account for students' code, then the
# reference build and a warm kernel cache, so grading a submission starts fast.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
VENV=${OCLF_GRADER_VENV:-${GRADER_VENV:-/opt/oclf-venv}}

# The pinned packages need Python 3.11 (22.04's python3 is 3.10).
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3.11 python3.11-venv python3.11-dev python3-venv python3-dev \
  g++ make git ca-certificates >/dev/null
[ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV"
VENV="$VENV" bash scripts/setup.sh

# Students' code runs as this account (grading/sandbox.py looks for it by name).
id oclf-sandbox >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin oclf-sandbox

chmod 700 /autograder/source
"$VENV/bin/python" -m grading.grade --prepare-only --ref-cache /autograder/ref-cache
