// The casts (kernels/convert.cu) run on the CPU (prelude.h) against the host's casts bit for
// bit. The Rust test emulated_kernels.rs writes the cases to the file named by argv[1], each
// record: from and to (DTYPE_* codes, u32 each), n (u64), the n inputs in `from`'s device
// layout, then the n results the host's casts give in `to`'s (Bool as 32-bit words). Each
// record's inputs then also go through the 16-bit moving kernels where `from` is 16-bit.
#include "prelude.h"
#include "../../kernels/gflow.cu"
#include "../../kernels/convert.cu"
#include <cstdint>
#include <cinttypes>
int fails = 0;

size_t device_size(unsigned d) {
  switch (d) {
  case DTYPE_F16: case DTYPE_BF16: return 2;
  case DTYPE_F64: case DTYPE_I64: return 8;
  default: return 4;
  }
}

uint64_t element(const std::vector<unsigned char> &v, size_t i, size_t size) {
  uint64_t e = 0;
  memcpy(&e, v.data() + i * size, size);
  return e;
}

// 16-bit elements through strided_w2: every other one gathered from an odd base, and all put
// into every other slot from an odd base of a larger buffer (its other slots untouched).
void moves16(const std::vector<unsigned char> &x, uint64_t n) {
  std::vector<unsigned short> in(n), out(n);
  memcpy(in.data(), x.data(), 2 * n);
  Meta meta{{(long long)n / 2, 2}};
  launch(2, [&] { strided_w2(in.data(), out.data(), n / 2, 1, meta, 1, 0); });
  for (uint64_t i = 0; i < n / 2; ++i)
    if (out[i] != in[1 + 2 * i] && fails++ < 20) printf("FAIL strided_w2 at %" PRIu64 "\n", i);
  std::vector<unsigned short> put(2 * n, 0xabcd);
  Meta every_other{{(long long)n, 2}};
  launch(1, [&] { strided_w2(in.data(), put.data(), n, 1, every_other, 1, 1); });
  for (uint64_t i = 0; i < 2 * n; ++i) {
    unsigned short w = i % 2 ? in[i / 2] : 0xabcd;
    if (put[i] != w && fails++ < 20) printf("FAIL strided_w2 put at %" PRIu64 "\n", i);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) { printf("usage: convert_test CASES\n"); return 2; }
  FILE *f = fopen(argv[1], "rb");
  if (!f) { printf("cannot open %s\n", argv[1]); return 2; }
  int records = 0;
  uint64_t elements = 0;
  unsigned ft[2];
  while (fread(ft, 4, 2, f) == 2) {
    uint64_t n;
    if (fread(&n, 8, 1, f) != 1) { printf("truncated record\n"); return 2; }
    size_t fs = device_size(ft[0]), ts = device_size(ft[1]);
    std::vector<unsigned char> x(n * fs), want(n * ts), got(n * ts + 1, 0x5a);
    if (fread(x.data(), 1, x.size(), f) != x.size() || fread(want.data(), 1, want.size(), f) != want.size()) {
      printf("truncated record\n");
      return 2;
    }
    launch(3, [&] { convert(x.data(), got.data(), n, (int)ft[0], (int)ft[1]); });
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t g = element(got, i, ts), w = element(want, i, ts);
      if (g != w && fails++ < 20)
        printf("FAIL convert %u -> %u at %" PRIu64 ": input %#" PRIx64 " gives %#" PRIx64 ", the host's %#" PRIx64 "\n",
               ft[0], ft[1], i, element(x, i, fs), g, w);
    }
    if (got[n * ts] != 0x5a && fails++ < 20) printf("FAIL convert %u -> %u wrote past its end\n", ft[0], ft[1]);
    if (fs == 2 && ft[1] == DTYPE_F32) moves16(x, n);
    records++;
    elements += n;
  }
  fclose(f);
  if (records == 0) { printf("no cases read\n"); return 2; }
  printf("records: %d, elements: %" PRIu64 "\nfails: %d\n", records, elements, fails);
  return fails != 0;
}
