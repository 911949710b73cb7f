# Sourced by scripts/demo and scripts/test: find uv, installing it with pip if it is missing.
# Sets UV to the command to run (an array), or leaves it empty if uv cannot be had.

find_uv() {
    UV=()
    if command -v uv >/dev/null 2>&1; then
        UV=(uv)
        return 0
    fi
    if ! command -v python3 >/dev/null 2>&1; then
        return 1
    fi
    echo "uv is not installed; installing it with pip" >&2
    # A plain install works in a virtualenv or on an older system; --user where the system
    # Python is marked externally managed (PEP 668); the last resort touches only ~/.local.
    python3 -m pip install --quiet uv 2>/dev/null \
        || python3 -m pip install --quiet --user uv 2>/dev/null \
        || python3 -m pip install --quiet --user --break-system-packages uv \
        || return 1
    if python3 -m uv --version >/dev/null 2>&1; then
        UV=(python3 -m uv)
        return 0
    fi
    return 1
}
