# Embed a file as a C array: cmake -DIN=FILE -DOUT=FILE.c -DNAME=symbol -P embed_file.cmake
# writes `const char NAME[]` (the bytes and a NUL) and `const size_t NAME_len` (the bytes).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," arr "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" arr "${arr}")
file(WRITE "${OUT}.tmp" "/* Generated from ${IN} by scripts/embed_file.cmake: do not edit. */\n#include <stddef.h>\n\nconst char ${NAME}[] = {\n${arr}0x00};\nconst size_t ${NAME}_len = ${n};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
