// SPDX-License-Identifier: GPL-2.0-or-later
#include "crc.hh"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pib::iba {

namespace {

// Tables for "slicing by 8": table[0] is the classic byte-at-a-time table
// of a reflected CRC; table[k][b] is the CRC of byte b followed by k zero
// bytes. Eight bytes then cost eight lookups instead of eight dependent
// steps, which is what lets a CRC keep up with memcpy-sized packets.
template <class T, T kReflectedPoly> struct Tables {
    std::array<std::array<T, 256>, 8> t{};
    constexpr Tables() {
        for (unsigned i = 0; i < 256; ++i) {
            T value = static_cast<T>(i);
            for (int bit = 0; bit < 8; ++bit)
                value = static_cast<T>(value & 1 ? (value >> 1) ^ kReflectedPoly : value >> 1);
            t[0][i] = value;
        }
        for (unsigned k = 1; k < 8; ++k)
            for (unsigned i = 0; i < 256; ++i)
                t[k][i] = static_cast<T>((t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff]);
    }
};

constexpr Tables<uint32_t, 0xedb88320u> kCrc32; // 0x04C11DB7 reflected
constexpr Tables<uint16_t, 0xd008u> kCrc16;     // 0x100B reflected

// A reflected CRC of up to 64 bits over `bytes`, continuing `crc`.
template <class T, T P> T update(const Tables<T, P> &tab, T crc, std::span<const uint8_t> bytes) {
    const uint8_t *p = bytes.data();
    size_t n = bytes.size();
    const auto &t = tab.t;
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian hosts only");
        v ^= crc; // the CRC so far lines up with the first bytes
        crc = static_cast<T>(t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^
                             t[4][(v >> 24) & 0xff] ^ t[3][(v >> 32) & 0xff] ^
                             t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56]);
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = static_cast<T>(t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8));
    return crc;
}

#if defined(__x86_64__)
// Folding with carry-less multiplication (Intel, "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ"): 16-byte blocks are folded
// forward, four streams 64 bytes apart, until one block is left, whose CRC
// (and the tail's) the tables finish. For a reflected CRC of width W with
// polynomial P, folding a block forward by D bytes multiplies its low half
// by K(128 + W + 8(D - 16)) and its high half by K(64 + W + 8(D - 16)),
// where K(e) is x^e mod P, bit-reflected in W bits and shifted left once.
template <unsigned W> constexpr uint64_t foldConstant(uint64_t poly, unsigned e) {
    const uint64_t top = uint64_t{1} << W;
    uint64_t r = 1;
    for (unsigned i = 0; i < e; ++i) {
        r <<= 1;
        if (r & top)
            r ^= top | poly;
    }
    uint64_t reflected = 0;
    for (unsigned i = 0; i < W; ++i)
        if (r >> i & 1)
            reflected |= uint64_t{1} << (W - 1 - i);
    return reflected << 1;
}

template <unsigned W, uint64_t kPoly> struct FoldConstants {
    static constexpr uint64_t by16lo = foldConstant<W>(kPoly, 128 + W);
    static constexpr uint64_t by16hi = foldConstant<W>(kPoly, 64 + W);
    static constexpr uint64_t by64lo = foldConstant<W>(kPoly, 128 + W + 384);
    static constexpr uint64_t by64hi = foldConstant<W>(kPoly, 64 + W + 384);
    static constexpr uint64_t by128lo = foldConstant<W>(kPoly, 128 + W + 896);
    static constexpr uint64_t by128hi = foldConstant<W>(kPoly, 64 + W + 896);
};

[[gnu::target("pclmul,sse2")]] inline __m128i fold(__m128i v, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(v, k, 0x00), _mm_clmulepi64_si128(v, k, 0x11));
}

[[gnu::target("pclmul,sse2")]] inline __m128i load(const uint8_t *p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
}

// Needs n >= 64.
template <class T, T R, unsigned W, uint64_t kPoly>
[[gnu::target("pclmul,sse2")]] T foldUpdate(const Tables<T, R> &tab, T crc, const uint8_t *p,
                                            size_t n) {
    using K = FoldConstants<W, kPoly>;
    const __m128i k16 =
        _mm_set_epi64x(static_cast<long long>(K::by16hi), static_cast<long long>(K::by16lo));
    const __m128i k64 =
        _mm_set_epi64x(static_cast<long long>(K::by64hi), static_cast<long long>(K::by64lo));
    // The CRC so far is the register: it lines up with the first bytes.
    __m128i a = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
    __m128i b = load(p + 16), c = load(p + 32), d = load(p + 48);
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        a = _mm_xor_si128(fold(a, k64), load(p));
        b = _mm_xor_si128(fold(b, k64), load(p + 16));
        c = _mm_xor_si128(fold(c, k64), load(p + 32));
        d = _mm_xor_si128(fold(d, k64), load(p + 48));
    }
    a = _mm_xor_si128(fold(a, k16), b);
    a = _mm_xor_si128(fold(a, k16), c);
    a = _mm_xor_si128(fold(a, k16), d);
    for (; n >= 16; p += 16, n -= 16)
        a = _mm_xor_si128(fold(a, k16), load(p));
    uint8_t last[16];
    _mm_storeu_si128(reinterpret_cast<__m128i *>(last), a);
    crc = update(tab, T{0}, std::span<const uint8_t>(last, 16));
    return update(tab, crc, std::span<const uint8_t>(p, n));
}

// The same with 256-bit registers (VPCLMULQDQ): eight streams, 128 bytes
// apart, two per register. Needs n >= 256.
[[gnu::target("vpclmulqdq,avx2")]] inline __m256i fold(__m256i v, __m256i k) {
    return _mm256_xor_si256(_mm256_clmulepi64_epi128(v, k, 0x00),
                            _mm256_clmulepi64_epi128(v, k, 0x11));
}

template <class T, T R, unsigned W, uint64_t kPoly>
[[gnu::target("vpclmulqdq,avx2,pclmul")]] T foldUpdateWide(const Tables<T, R> &tab, T crc,
                                                           const uint8_t *p, size_t n) {
    using K = FoldConstants<W, kPoly>;
    const __m128i k16 =
        _mm_set_epi64x(static_cast<long long>(K::by16hi), static_cast<long long>(K::by16lo));
    const __m256i k128 =
        _mm256_set_epi64x(static_cast<long long>(K::by128hi), static_cast<long long>(K::by128lo),
                          static_cast<long long>(K::by128hi), static_cast<long long>(K::by128lo));
    auto load256 = [](const uint8_t *at) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(at));
    };
    __m256i a[4];
    for (int i = 0; i < 4; ++i)
        a[i] = load256(p + 32 * i);
    a[0] = _mm256_xor_si256(
        a[0], _mm256_set_m128i(_mm_setzero_si128(), _mm_cvtsi32_si128(static_cast<int>(crc))));
    p += 128;
    n -= 128;
    for (; n >= 128; p += 128, n -= 128)
        for (int i = 0; i < 4; ++i)
            a[i] = _mm256_xor_si256(fold(a[i], k128), load256(p + 32 * i));
    // Eight blocks, in stream order: fold them into one.
    __m128i v = _mm256_castsi256_si128(a[0]);
    v = _mm_xor_si128(fold(v, k16), _mm256_extracti128_si256(a[0], 1));
    for (int i = 1; i < 4; ++i) {
        v = _mm_xor_si128(fold(v, k16), _mm256_castsi256_si128(a[i]));
        v = _mm_xor_si128(fold(v, k16), _mm256_extracti128_si256(a[i], 1));
    }
    for (; n >= 16; p += 16, n -= 16)
        v = _mm_xor_si128(fold(v, k16), load(p));
    uint8_t last[16];
    _mm_storeu_si128(reinterpret_cast<__m128i *>(last), v);
    crc = update(tab, T{0}, std::span<const uint8_t>(last, 16));
    return update(tab, crc, std::span<const uint8_t>(p, n));
}

const bool kHaveClmul = __builtin_cpu_supports("pclmul");
const bool kHaveWideClmul = __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx2");
#endif

} // namespace

uint32_t crc32Update(uint32_t crc, std::span<const uint8_t> bytes) {
#if defined(__x86_64__)
    if (kHaveClmul && bytes.size() >= 64)
        return foldUpdate<uint32_t, 0xedb88320u, 32, 0x04c11db7u>(kCrc32, crc, bytes.data(),
                                                                  bytes.size());
#endif
    return update(kCrc32, crc, bytes);
}

uint16_t crc16Update(uint16_t crc, std::span<const uint8_t> bytes) {
#if defined(__x86_64__)
    if (kHaveClmul && bytes.size() >= 64)
        return foldUpdate<uint16_t, 0xd008u, 16, 0x100bu>(kCrc16, crc, bytes.data(), bytes.size());
#endif
    return update(kCrc16, crc, bytes);
}

} // namespace pib::iba
