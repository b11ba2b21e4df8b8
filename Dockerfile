# Lab-machine image for opencl_functions: Debian bookworm, the project's own setup
# (scripts/setup.sh: PoCL, CLBlast, .venv), the tree built, and `make run` as its command.
#
#   make handout && docker build --build-arg TREE=build/handout -t oclf-handout .   (students)
#   docker build -t oclf .                                                          (reference)
#   docker run --rm -it oclf                          # make run on PoCL (the CPU)
#   docker run --rm -it --gpus all oclf make info     # a host NVIDIA GPU, see below
#
# A host NVIDIA GPU: install the NVIDIA container toolkit on the host and run with
# --gpus all. The toolkit mounts the driver's libnvidia-opencl.so.1 into the container
# (NVIDIA_DRIVER_CAPABILITIES must include "compute"); the ICD file written below makes
# the OpenCL loader find it. Without a GPU that entry is skipped and PoCL is used.
# Pick the device with OCL_DEVICE (docker run -e OCL_DEVICE=nvidia ...).
#
# The steps are the ones the tests run on the tree (scripts/setup.sh, make build, make run);
# keep them so, as the image itself is not built in CI.
FROM debian:bookworm

ARG TREE=.
ENV DEBIAN_FRONTEND=noninteractive \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ make ca-certificates \
 && mkdir -p /etc/OpenCL/vendors \
 && echo "libnvidia-opencl.so.1" > /etc/OpenCL/vendors/nvidia.icd \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opencl_functions
COPY ${TREE} .
RUN bash scripts/setup.sh && make build

CMD ["make", "run"]
