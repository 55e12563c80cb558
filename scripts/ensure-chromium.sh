#!/usr/bin/env bash
# Makes sure the browser of examples/chat-widget's test runs: $CHROMIUM_PATH (default Debian's
# /usr/bin/chromium), installing Debian's chromium with apt-get when the default is missing.
# Idempotent. Exits non-zero with the reason when it cannot: `pnpm test` stops there rather
# than skip the only test that proves the widget in a real browser.
set -euo pipefail

CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"

# stderr is dropped: Debian's wrapper sources /etc/chromium.d/dev-shm, whose test
# `[ $(findmnt … /dev/shm) -lt … ]` breaks where /dev/shm is mounted twice (findmnt prints two
# numbers: "[: 25275424768: unexpected operator"). Harmless: the wrapper then only leaves out
# --disable-dev-shm-usage, which Playwright passes to the browser itself.
runs() { "$CHROMIUM" --version >/dev/null 2>&1; }

fail() {
  echo "ensure-chromium: $1" >&2
  echo "ensure-chromium: the chat widget's browser test (examples/chat-widget) needs Chromium." >&2
  echo "ensure-chromium: install it (Debian/Ubuntu: 'sudo apt-get install chromium'), or set CHROMIUM_PATH to a Chromium or Chrome binary." >&2
  exit 1
}

if runs; then exit 0; fi
if [ -n "${CHROMIUM_PATH:-}" ]; then fail "CHROMIUM_PATH=$CHROMIUM_PATH does not run"; fi
command -v apt-get >/dev/null 2>&1 || fail "$CHROMIUM is missing (or does not run) and apt-get is not available to install it"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  # -n: never wait for a password inside a test run.
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    fail "$CHROMIUM is missing (or does not run); installing it needs root or password-less sudo"
  fi
fi

echo "ensure-chromium: $CHROMIUM is missing (or does not run); installing Debian's chromium with apt-get (once per machine)..." >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >&2 || fail "apt-get update failed"
"${SUDO[@]}" apt-get install -y -qq chromium >/dev/null ||
  fail "apt-get install chromium failed"
runs || fail "chromium was installed but $CHROMIUM --version fails"
echo "ensure-chromium: installed $("$CHROMIUM" --version 2>/dev/null)" >&2
