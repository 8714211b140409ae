#!/usr/bin/env bash
# Installs the system packages Slicewise's embedded stack needs (Debian): Prometheus and promtool.
# Idempotent: does nothing when they are already there. Never starts a system service.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: prometheus/promtool not found and apt-get is unavailable; install Prometheus >= 2.40 by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "error: installing prometheus needs root or sudo" >&2; exit 1; }
    SUDO="sudo"
fi
echo "installing prometheus (Debian package) ..."
# Without systemd the package starts no daemon; Slicewise runs its own Prometheus on 127.0.0.1.
$SUDO env DEBIAN_FRONTEND=noninteractive bash -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null'
command -v promtool >/dev/null 2>&1 || { echo "error: promtool missing after installing prometheus" >&2; exit 1; }
