#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests (examples/chat-widget) when it is missing.
# Idempotent: does nothing when /usr/bin/chromium already runs. Needs root (or sudo) and apt.
set -euo pipefail
if [ -x /usr/bin/chromium ] && /usr/bin/chromium --version >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
