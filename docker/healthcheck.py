"""Health check of the dashboard service: exit 0 iff Streamlit's ``/_stcore/health``
answers ``ok`` on the port the service listens on (``STREAMLIT_SERVER_PORT``, set in
docker-compose.yml). Python rather than curl: the slim image has no curl, and this same
file runs outside Docker in tests/test_compose.py.
"""

from __future__ import annotations

import os
import sys
import urllib.request

PORT_ENV = "STREAMLIT_SERVER_PORT"


def main() -> int:
    port = os.environ.get(PORT_ENV)
    if not port:
        print(f"unhealthy: {PORT_ENV} is not set (docker-compose.yml sets it)")
        return 1
    url = f"http://127.0.0.1:{port}/_stcore/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode(errors="replace").strip()
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}")
        return 1
    if body != "ok":
        print(f"unhealthy: {url} answered {body[:200]!r}, expected 'ok'")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
