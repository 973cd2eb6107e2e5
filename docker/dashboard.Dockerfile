# The dashboard service's image: Streamlit over an asv results directory mounted at run
# time. Built and run through docker-compose.yml, which holds the command, environment,
# port, results mount and health check (tests/test_compose.py runs that command outside
# Docker), so this file only builds.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The dashboard imports regress, and importing any safeattn module runs
# safeattn/__init__.py, which imports the kernels (torch, triton). So torch is needed,
# but only the CPU wheel: pinned, from PyTorch's CPU index, because an unpinned torch from
# PyPI is the CUDA build (gigabytes of unused libraries).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

# The rest comes from pyproject.toml (core dependencies + the dashboard extra), with the
# torch just installed held as a constraint so nothing can replace it.
COPY pyproject.toml docker/requirements.py /tmp/build/
RUN python -c "import torch; print(f'torch=={torch.__version__}')" > /tmp/build/constraints.txt \
 && python /tmp/build/requirements.py /tmp/build/pyproject.toml dashboard \
      > /tmp/build/requirements.txt \
 && pip install -r /tmp/build/requirements.txt -c /tmp/build/constraints.txt \
 && rm -rf /tmp/build

# The source tree in the repository's layout: dashboard/app.py puts /app on sys.path and
# imports dashboard.*, regress.* and safeattn.* from here (none is pip-installed).
WORKDIR /app
COPY safeattn/ safeattn/
COPY regress/ regress/
COPY dashboard/ dashboard/
COPY docker/healthcheck.py docker/healthcheck.py

# Read-only results, nothing to write: run as an unprivileged user.
RUN useradd --create-home --uid 10001 dashboard
USER 10001
EXPOSE 8501
