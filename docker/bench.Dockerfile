# The bench service's image: the environment tools/run.py needs on an NVIDIA GPU.
# The code under test is not in the image: the service mounts the checkout read-only and
# the entry point clones it (docker/bench-entrypoint.sh), because asv measures git commits.
# docker-compose.yml holds the entry point, mounts and GPU reservation.
#
# torch comes from the official PyTorch CUDA image and is never reinstalled. The default
# matches the project's GPU runs (torch 2.11 with its triton 3.6); pyproject.toml requires
# triton >= 3.6, so an older base image fails the build below instead of swapping triton.
ARG PYTORCH_IMAGE=pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
FROM ${PYTORCH_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEBIAN_FRONTEND=noninteractive

# git: asv and the entry point read the checkout's history. gcc + libc6-dev: Triton
# compiles a small C launcher at run time, and the "runtime" images ship no compiler
# (pytorch/pytorch#116696). safe.directory: the mounted checkout belongs to the host user,
# not to root, and git refuses such repositories otherwise. Unpinned apt versions: the
# base image's distribution fixes them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/* \
 && git config --system --add safe.directory '*'

# Triton's launcher also needs Python.h: fail the build here rather than mid-benchmark.
RUN python -c "import os, sys, sysconfig; \
h = os.path.join(sysconfig.get_paths()['include'], 'Python.h'); \
os.path.exists(h) or sys.exit('no ' + h + ': Triton could not build its launcher')"

# pyproject.toml's core dependencies, the bench extra (asv, ...) and the build requirements
# (asv builds each commit offline, without build isolation), plus what tools/run.py
# checks its offline virtualenv can install (ENV_PREREQUISITES in tools/runner/invocation.py).
# The image's torch and triton are held as constraints: pip fails rather than replacing either.
COPY pyproject.toml docker/requirements.py /tmp/build/
COPY tools/__init__.py /tmp/build/tools/
COPY tools/runner/ /tmp/build/tools/runner/
RUN python -c "import torch, triton; print(f'torch=={torch.__version__}'); print(f'triton=={triton.__version__}')" \
      > /tmp/build/constraints.txt \
 && python /tmp/build/requirements.py /tmp/build/pyproject.toml --build-system bench \
      > /tmp/build/requirements.txt \
 && PYTHONPATH=/tmp/build python -c "from tools.runner.invocation import ENV_PREREQUISITES as E; print('\\n'.join(E))" \
      >> /tmp/build/requirements.txt \
 && pip install -r /tmp/build/requirements.txt -c /tmp/build/constraints.txt \
 && rm -rf /tmp/build

COPY docker/bench-entrypoint.sh /usr/local/bin/safeattn-bench
