#!/usr/bin/env bash
# Installs the system packages Slicewise needs (Debian): Prometheus and promtool for the embedded stack, and
# Chromium (with a font) for the browser test of the Airflow UI pages (tests/plugins/test_browser.py).
# Idempotent: installs only what is missing, and does nothing when everything is there. Never starts a service.
set -euo pipefail
missing=()
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    missing+=(prometheus)
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    missing+=(chromium)
fi
# Headless Chromium draws text with whatever fonts exist; without any, pages render as empty boxes.
if [ ! -d /usr/share/fonts/truetype/dejavu ]; then
    missing+=(fonts-dejavu-core)
fi
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: ${missing[*]} missing and apt-get is unavailable; install Prometheus >= 2.40 and Chromium by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "error: installing ${missing[*]} needs root or sudo" >&2; exit 1; }
    SUDO="sudo"
fi
echo "installing ${missing[*]} (Debian packages) ..."
# Without systemd the prometheus package starts no daemon; Slicewise runs its own Prometheus on 127.0.0.1.
$SUDO env DEBIAN_FRONTEND=noninteractive bash -c \
    "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${missing[*]} >/dev/null"
command -v promtool >/dev/null 2>&1 || { echo "error: promtool missing after installing prometheus" >&2; exit 1; }
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || { echo "error: chromium missing after installing it" >&2; exit 1; }
