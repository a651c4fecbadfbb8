#!/usr/bin/env bash
# Installs what the scripts need from the one list, scripts/packages.txt.
#
# usage: bash scripts/deps.sh [--offline] GROUP...   (GROUP: build, test, fuzz)
#
# Debian packages: those dpkg does not list as installed are installed with apt-get
# (as root; with `sudo -n` where that works without a password). Otherwise, or with
# --offline, one line names the exact command to run and the script exits 1 (a missing
# optional package only warns). Without dpkg (not Debian) it names the packages and goes
# on: the build then names what it cannot find.
# pip packages: each one the python3 on PATH cannot import is installed with its pip
# (retried with --break-system-packages where pip refuses an externally managed Python);
# a failure, or --offline, warns: the tests that need it skip with a line each.
set -euo pipefail
cd "$(dirname "$0")/.."

offline=0
groups=()
for a in "$@"; do
    case "$a" in
    --offline) offline=1 ;;
    build | test | fuzz) groups+=("$a") ;;
    *)
        echo "deps.sh: unknown argument '$a' (usage: deps.sh [--offline] build|test|fuzz...)" >&2
        exit 2
        ;;
    esac
done
[ "${#groups[@]}" -gt 0 ] || groups=(build)

apt_req=() apt_opt=() pip_pkgs=()
while read -r group kind name flag _; do
    case "$group" in "" | "#"*) continue ;; esac
    want=0
    for g in "${groups[@]}"; do [ "$g" = "$group" ] && want=1; done
    [ "$want" -eq 1 ] || continue
    case "$kind" in
    apt) if [ "${flag:-}" = optional ]; then apt_opt+=("$name"); else apt_req+=("$name"); fi ;;
    pip) pip_pkgs+=("$name") ;;
    *)
        echo "deps.sh: scripts/packages.txt: unknown kind '$kind' for $name" >&2
        exit 2
        ;;
    esac
done <scripts/packages.txt

# missing NAME...: the names dpkg does not list as installed
missing() {
    local p
    for p in "$@"; do
        case "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)" in
        ii*) ;;
        *) echo "$p" ;;
        esac
    done
}

rc=0
if ! command -v dpkg-query >/dev/null; then
    echo "deps.sh: no dpkg (not Debian): install the equivalents of: ${apt_req[*]} ${apt_opt[*]}" >&2
else
    mapfile -t need < <(missing "${apt_req[@]}")
    mapfile -t want < <(missing "${apt_opt[@]}")
    if [ "${#need[@]}" -gt 0 ] || [ "${#want[@]}" -gt 0 ]; then
        run=""
        if [ "$offline" -eq 1 ]; then
            run="no"
        elif [ "$(id -u)" -ne 0 ]; then
            if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then run="sudo -n"; else run="no"; fi
        fi
        if [ "$run" = no ]; then
            if [ "${#need[@]}" -gt 0 ]; then
                echo "deps.sh: missing Debian packages; run: sudo apt-get install -y --no-install-recommends ${need[*]}" >&2
                rc=1
            fi
            if [ "${#want[@]}" -gt 0 ]; then
                echo "deps.sh: optional, not installed (their tests skip): sudo apt-get install -y --no-install-recommends ${want[*]}" >&2
            fi
        else
            export DEBIAN_FRONTEND=noninteractive
            echo "deps.sh: installing ${need[*]} ${want[*]} (apt-get${run:+ via $run})" >&2
            $run apt-get update -qq >/dev/null || echo "deps.sh: apt-get update failed" >&2
            if [ "${#need[@]}" -gt 0 ] &&
                ! $run apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
                echo "deps.sh: apt-get install failed; run: sudo apt-get install -y --no-install-recommends ${need[*]}" >&2
                rc=1
            fi
            for p in "${want[@]}"; do
                $run apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 ||
                    echo "deps.sh: apt-get install $p failed: the tests that need it will skip" >&2
            done
        fi
    fi
fi

py="${PYTHON:-python3}"
for p in "${pip_pkgs[@]}"; do
    "$py" -c "import $p" >/dev/null 2>&1 && continue
    if [ "$offline" -eq 1 ]; then
        echo "deps.sh: offline: $py cannot import $p (pip install $p): the tests that need it will skip" >&2
        continue
    fi
    log="$(mktemp)"
    # one retry, short timeouts: an unreachable PyPI costs seconds, not minutes
    if ! "$py" -m pip install -q --retries 1 --timeout 20 "$p" >"$log" 2>&1; then
        if grep -q externally-managed "$log" &&
            "$py" -m pip install -q --retries 1 --timeout 20 --break-system-packages "$p" >"$log" 2>&1; then
            :
        else
            echo "deps.sh: $py -m pip install $p failed: the tests that need it will skip" >&2
            tail -n 2 "$log" >&2
        fi
    fi
    rm -f "$log"
done
exit "$rc"
