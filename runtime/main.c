/* specdec CLI (placeholder until the CLI lands). */
#include <stdio.h>
int main(void) {
    fprintf(stderr, "specdec: not built yet\n");
    return 1;
}
