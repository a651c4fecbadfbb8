#!/bin/sh
# cmake --install into a temporary prefix, then examples/simple.c built against the
# installed library with `pkg-config --cflags --libs specdec` alone (no path into the
# source or build folders) and run on the shipped TinyStories pair. A ctest test
# (CMakeLists.txt: install_pkgconfig); skips with a line when pkg-config is missing.
# usage: sh scripts/check_install.sh CMAKE BUILD_DIR SOURCE_DIR [CC]
set -eu
cmake=$1
build=$2
src=$3
cc=${4:-cc}
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "check_install: skip: pkg-config is not installed (Debian: apt-get install pkg-config)"
    exit 0
fi
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
"$cmake" --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 || {
    cat "$prefix/install.log"
    echo "check_install: cmake --install $build --prefix $prefix failed"
    exit 1
}
for f in include/specdec.h; do
    [ -f "$prefix/$f" ] || { echo "check_install: $prefix/$f not installed"; exit 1; }
done
pc=$(find "$prefix" -name specdec.pc | head -n 1)
[ -n "$pc" ] || { echo "check_install: no specdec.pc under $prefix"; exit 1; }
# The example's source alone, copied where nothing else of the project is.
mkdir "$prefix/user"
cp "$src/examples/simple.c" "$prefix/user/simple.c"
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs specdec)
echo "check_install: $cc simple.c $flags"
case "$flags" in
*"$src"* | *"$build"*) echo "check_install: the flags name the source or build folder"; exit 1 ;;
esac
# shellcheck disable=SC2086 # the flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -o "$prefix/user/simple" "$prefix/user/simple.c" $flags
out=$("$prefix/user/simple" "$src/models/tinystories-target-q8_0.gguf" \
    "$src/models/tinystories-draft-q8_0.gguf" "Once upon a time")
echo "$out" | tail -n 6
echo "$out" | grep -q "^tokens/pass " || { echo "check_install: no statistics printed"; exit 1; }
echo "check_install: ok ($prefix)"
