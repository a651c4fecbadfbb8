#!/bin/sh
# The public header alone: include/specdec.h compiled as C11 and as C++17 with every
# warning an error (-pedantic), in a translation unit that includes nothing else and
# uses its types. A ctest test (CMakeLists.txt: public_header).
# usage: sh scripts/check_header.sh include/specdec.h [CC]
set -eu
header=$1
cc=${2:-cc}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$header" "$dir/specdec.h"
cat > "$dir/use.c" <<'EOT'
#include "specdec.h"
/* Every type of the face, and a call through each kind of pointer it declares. */
int use_face(sd_context *ctx, sd_queue *q);
int use_face(sd_context *ctx, sd_queue *q) {
    sd_error err = {SD_OK, {0}};
    sd_context_params cp = sd_context_default_params();
    sd_completion_params p = sd_completion_default_params();
    sd_queue_params qp = sd_queue_default_params();
    sd_gen_stats st;
    sd_piece_cb pcb = 0;
    sd_event_cb ecb = 0;
    int64_t id = 0;
    (void)cp;
    (void)qp;
    if (sd_complete(ctx, "x", &p, pcb, 0, &st, &err) != SD_OK) return (int)err.status;
    if (sd_queue_submit(q, "x", &p, ecb, 0, &id, &err) != SD_OK) return (int)err.status;
    return sd_stats_tokens_per_pass(&st) > 0.0 && sd_stop_reason_str(st.stop) != 0;
}
EOT
cp "$dir/use.c" "$dir/use.cpp"
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only "$dir/use.c"
echo "check_header: C11 ($cc -std=c11 -pedantic): ok"
cxx=
for c in c++ g++ clang++; do
    if command -v "$c" >/dev/null 2>&1; then cxx=$c; break; fi
done
if [ -z "$cxx" ]; then
    echo "check_header: skip C++: no C++ compiler (c++, g++, clang++) on PATH"
    exit 0
fi
"$cxx" -std=c++17 -Wall -Wextra -Werror -pedantic -fsyntax-only "$dir/use.cpp"
echo "check_header: C++17 ($cxx -std=c++17 -pedantic): ok"
