#!/usr/bin/env bash
# Sourced by scripts/demo.sh and scripts/stories260k.sh: sd_build DIR TARGET configures and
# builds one target of a Release build in DIR, one line per stage on stderr. cmake's own
# output goes to DIR/build.log; when configuring fails, the packages it could not find are
# named with the Debian package that has them, and on a build error the log's end is shown.
sd_build() {
    local dir="$1" target="$2" who="${0##*/}"
    local log="$dir/build.log"
    mkdir -p "$dir"
    if ! command -v cmake >/dev/null; then
        echo "$who: cmake not found (Debian: apt-get install cmake)" >&2
        return 1
    fi
    echo "$who: configuring $dir (cmake, Release)" >&2
    if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSD_BUILD_TESTS=OFF >"$log" 2>&1; then
        local missing=0 line pkg module=""
        # pkg-config's modules ("Checking for module 'X'" then a "not found" line, as
        # pkg-config and pkgconf word it), CMake's find_package names, the compiler itself
        while IFS= read -r line; do
            pkg=""
            case "$line" in
            *"Checking for module '"*)
                module="${line#*Checking for module \'}"
                module="${module%%\'*}"
                ;;
            *"No package '"*"' found"* | *"Package '"*"not found"*)
                case "$module" in
                jansson) pkg="jansson (Debian: libjansson-dev)" ;;
                criterion) pkg="criterion (Debian: libcriterion-dev)" ;;
                *) pkg="the pkg-config module '$module'" ;;
                esac
                ;;
            *"Could NOT find PkgConfig"*) pkg="pkg-config (Debian: pkg-config)" ;;
            *"Could NOT find OpenMP"*) pkg="OpenMP (Debian: gcc's libgomp, or libomp-dev for clang)" ;;
            *"Could NOT find Threads"*) pkg="pthreads (Debian: libc6-dev)" ;;
            *"No CMAKE_C_COMPILER could be found"*) pkg="a C compiler (Debian: build-essential)" ;;
            esac
            if [ -n "$pkg" ]; then
                echo "$who: missing: $pkg" >&2
                missing=1
            fi
        done <"$log"
        if [ "$missing" -eq 0 ]; then
            grep -E "CMake Error|Error|error:" "$log" | head -n 10 >&2 || tail -n 20 "$log" >&2
        fi
        echo "$who: configuring failed (full output: $log)" >&2
        return 1
    fi
    echo "$who: building $target (-j $jobs; the first build takes about a minute on 2 cores)" >&2
    local rc=0
    # one line per target built (the library, the CLI, the program) instead of cmake's
    # line per source file
    cmake --build "$dir" -j "$jobs" --target "$target" 2>&1 | tee -a "$log" |
        sed -un 's/^\[ *[0-9]*%\] Built target \(.*\)$/  built \1/p' >&2 || rc=$?
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    if [ "$rc" -ne 0 ]; then
        grep -E "error|Error" "$log" | tail -n 10 >&2 || tail -n 20 "$log" >&2
        echo "$who: the build failed (full output: $log)" >&2
        return 1
    fi
}
