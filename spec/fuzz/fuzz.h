/*
** fuzz.h: what the libFuzzer targets of spec/fuzz share. Each fuzz_<name>.c defines
** LLVMFuzzerTestOneInput and is built by `make fuzz-build` under ASan+UBSan; a crash,
** a sanitizer report, a leak or a failed FUZZ_CHECK is a finding (libFuzzer saves the
** input in build/fuzz/artifacts/<name>/).
*/
#ifndef tidepool_fuzz_h
#define tidepool_fuzz_h

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* An invariant of the code under test: on failure, say which and abort (libFuzzer
** catches the abort and keeps the input). */
#define FUZZ_CHECK(cond, ...) do { \
    if (!(cond)) { \
      fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__); \
      fputc('\n', stderr); \
      abort(); \
    } \
  } while (0)

#endif
