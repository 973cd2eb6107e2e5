# The results-follower service's image: tools/follow_results.py (standard library only) and
# git. docker-compose.yml holds its command, environment and mounts (tests run that command
# outside Docker, in tests/test_publish_results.py), so this file only builds. It runs as
# root, as the bench service does: it writes into the results directory that the host mounts.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1

# git fetches the results branch; ca-certificates for https remotes. Unpinned apt versions:
# the base image's distribution fixes them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# The repository's layout, so that the compose command is the same here and in a checkout.
WORKDIR /app
COPY tools/follow_results.py tools/follow_results.py
