// SPDX-License-Identifier: GPL-2.0-or-later
#include "crc.hh"

#include <algorithm>
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
// steps. They serve headers and data too short to fold (below), and CPUs
// without carry-less multiplication.
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

// A reflected CRC of up to 32 bits over `bytes`, continuing `crc`.
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
    if (n >= 4) { // the same by four: headers often end with four bytes
        uint32_t v;
        std::memcpy(&v, p, 4);
        v ^= crc; // T has at most 32 bits
        crc = static_cast<T>(t[3][v & 0xff] ^ t[2][(v >> 8) & 0xff] ^ t[1][(v >> 16) & 0xff] ^
                             t[0][v >> 24]);
        p += 4;
        n -= 4;
    }
    while (n--)
        crc = static_cast<T>(t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8));
    return crc;
}

// Polynomials over GF(2) as integers (bit k is the coefficient of x^k),
// for the constants below and for the joint CRC's start value.
__extension__ typedef unsigned __int128 Wide; // products of two 64-bit polynomials

constexpr uint32_t degree(Wide a) {
    uint32_t d = 0;
    while (a >>= 1)
        ++d;
    return d;
}

constexpr Wide polyMul(uint64_t a, uint64_t b) {
    Wide r = 0;
    for (unsigned i = 0; i < 64; ++i)
        if (b >> i & 1)
            r ^= static_cast<Wide>(a) << i;
    return r;
}

constexpr uint64_t polyMod(Wide a, uint64_t m) {
    const uint32_t dm = degree(m);
    for (uint32_t d = degree(a); a >> dm && d >= dm; --d)
        if (a >> d & 1)
            a ^= static_cast<Wide>(m) << (d - dm);
    return static_cast<uint64_t>(a);
}

// The inverse of a modulo m (extended Euclid); 0 if there is none.
constexpr uint64_t polyInverse(uint64_t a, uint64_t m) {
    uint64_t r0 = m, r1 = polyMod(a, m), s0 = 0, s1 = 1;
    while (r1 > 1) {
        uint64_t q = 0, r = r0;
        while (r && degree(r) >= degree(r1)) {
            const uint32_t shift = degree(r) - degree(r1);
            q |= uint64_t{1} << shift;
            r ^= r1 << shift;
        }
        const uint64_t s = s0 ^ polyMod(polyMul(q, s1), m);
        r0 = r1, r1 = r, s0 = s1, s1 = s;
    }
    return r1 == 1 ? s1 : 0;
}

constexpr uint64_t reflect(uint64_t v, unsigned bits) {
    uint64_t r = 0;
    for (unsigned i = 0; i < bits; ++i)
        if (v >> i & 1)
            r |= uint64_t{1} << (bits - 1 - i);
    return r;
}

// The packet's two CRCs cover mostly the same bytes, so both are folded
// in one pass modulo their product Q = P16 * P32 (degree 48): what is
// congruent modulo Q is congruent modulo each factor, and the tables of
// each CRC finish the job from the one folded block.
constexpr uint64_t kPoly32 = 0x104c11db7ull, kPoly16 = 0x1100bull;
constexpr uint64_t kPoly48 = static_cast<uint64_t>(polyMul(kPoly16, kPoly32));
static_assert(degree(kPoly48) == 48);

// The two CRCs' running values enter the folded data as one 48-bit value
// G XORed into its first six bytes. By the Chinese remainder theorem G is
// S32 x^16 E32 + S16 x^32 E16 (mod Q), where S32 and S16 are the running
// values as polynomials and E32 (E16) is 1 modulo P32 (P16) and 0 modulo
// the other factor.
constexpr uint64_t kE32 =
    polyMod(polyMul(kPoly16, polyInverse(kPoly16, kPoly32)), kPoly48); // ≡ 1 (P32), 0 (P16)
constexpr uint64_t kE16 =
    polyMod(polyMul(kPoly32, polyInverse(kPoly32, kPoly16)), kPoly48); // ≡ 1 (P16), 0 (P32)
static_assert(polyInverse(kPoly16, kPoly32) != 0 && polyInverse(kPoly32, kPoly16) != 0,
              "the two CRC polynomials are coprime");
static_assert(polyMod(kE32, kPoly32) == 1 && polyMod(kE32, kPoly16) == 0);
static_assert(polyMod(kE16, kPoly16) == 1 && polyMod(kE16, kPoly32) == 0);
constexpr uint64_t kStart32 = polyMod(polyMul(kE32, uint64_t{1} << 16), kPoly48);
constexpr uint64_t kStart16 = polyMod(polyMul(kE16, uint64_t{1} << 32), kPoly48);

// G, reflected as the fold takes it (bit i is the i-th bit of the data).
constexpr uint64_t jointStartSlow(uint32_t crc32, uint16_t crc16) {
    const uint64_t s32 = reflect(crc32, 32), s16 = reflect(crc16, 16);
    const uint64_t g = polyMod(polyMul(s32, kStart32) ^ polyMul(s16, kStart16), kPoly48);
    return reflect(g, 48);
}

// G is linear in the 48 bits of the two running values: six tables, one
// per byte of (crc16 << 32 | crc32), make it six lookups.
struct JointStartTables {
    std::array<std::array<uint64_t, 256>, 6> t{};
    constexpr JointStartTables() {
        std::array<uint64_t, 48> basis{};
        for (unsigned i = 0; i < 32; ++i)
            basis[i] = jointStartSlow(uint32_t{1} << i, 0);
        for (unsigned i = 0; i < 16; ++i)
            basis[32 + i] = jointStartSlow(0, static_cast<uint16_t>(1u << i));
        for (unsigned j = 0; j < 6; ++j)
            for (unsigned v = 0; v < 256; ++v)
                for (unsigned b = 0; b < 8; ++b)
                    if (v >> b & 1)
                        t[j][v] ^= basis[8 * j + b];
    }
};
constexpr JointStartTables kJointStart;

// What the CRC-32 alone sees changed when byte 4 of the folded data is
// XORed with v: v as a polynomial, x^8 before the start value's 48 bits
// end, times E32 so that the CRC-16 sees nothing.
constexpr uint64_t crc32OnlyByte4Slow(uint8_t v) {
    const uint64_t g = polyMod(polyMul(reflect(v, 8) << 8, kE32), kPoly48);
    return reflect(g, 48);
}

struct Byte4Table {
    std::array<uint64_t, 256> t{};
    constexpr Byte4Table() {
        for (unsigned v = 0; v < 256; ++v)
            t[v] = crc32OnlyByte4Slow(static_cast<uint8_t>(v));
    }
};
constexpr Byte4Table kCrc32OnlyByte4;

uint64_t jointStart(uint32_t crc32, uint16_t crc16) {
    const uint64_t in = uint64_t{crc16} << 32 | crc32;
    uint64_t g = 0;
    for (unsigned j = 0; j < 6; ++j)
        g ^= kJointStart.t[j][in >> (8 * j) & 0xff];
    return g;
}

#if defined(__x86_64__)
// Folding with carry-less multiplication (Intel, "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ"): 16-byte blocks are folded
// forward, several streams apart, until one block is left; the tail of
// fewer than 16 bytes is folded into it too. For a reflected CRC of width
// W with polynomial P, folding a block forward by D bytes multiplies its
// low half by K(128 + W + 8(D - 16)) and its high half by
// K(64 + W + 8(D - 16)), where K(e) is x^e mod P, bit-reflected in W bits
// and shifted left once. The operand then stands for x^(8D + 63) mod P
// whatever W is, so the same loop folds modulo Q.
template <unsigned W> constexpr uint64_t foldConstant(uint64_t poly, unsigned e) {
    uint64_t r = 1; // x^e mod poly, one power at a time
    for (unsigned i = 0; i < e; ++i) {
        r <<= 1;
        if (r >> W & 1)
            r ^= poly;
    }
    return reflect(r, W) << 1;
}

template <uint64_t kPoly> struct FoldConstants {
    static constexpr unsigned W = degree(kPoly);
    static constexpr uint64_t by16lo = foldConstant<W>(kPoly, 128 + W);
    static constexpr uint64_t by16hi = foldConstant<W>(kPoly, 64 + W);
    static constexpr uint64_t by32lo = foldConstant<W>(kPoly, 128 + W + 128);
    static constexpr uint64_t by32hi = foldConstant<W>(kPoly, 64 + W + 128);
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

// Folds the whole 16-byte blocks at p onto v, one at a time; p and n are
// left at the tail of fewer than 16 bytes. The last step of every fold.
template <uint64_t kPoly>
[[gnu::target("pclmul,sse2")]] __m128i foldBlocks(__m128i v, const uint8_t *&pRef, size_t &nRef) {
    using K = FoldConstants<kPoly>;
    const __m128i k16 =
        _mm_set_epi64x(static_cast<long long>(K::by16hi), static_cast<long long>(K::by16lo));
    const uint8_t *p = pRef;
    size_t n = nRef;
    for (; n >= 16; p += 16, n -= 16)
        v = _mm_xor_si128(fold(v, k16), load(p));
    pRef = p;
    nRef = n;
    return v;
}

// Folds the data at p (n >= 64 bytes), `start` XORed into its first bytes,
// into one block; p and n are left at the tail of fewer than 16 bytes.
// The cursor is copied into locals and the streams are named registers:
// through the references, or in an array, the compiler kept them in
// memory and every fold waited for a store to be forwarded.
template <uint64_t kPoly>
[[gnu::target("pclmul,sse2")]] __m128i foldNarrow(uint64_t start, const uint8_t *&pRef,
                                                  size_t &nRef) {
    using K = FoldConstants<kPoly>;
    const __m128i k16 =
        _mm_set_epi64x(static_cast<long long>(K::by16hi), static_cast<long long>(K::by16lo));
    const __m128i k64 =
        _mm_set_epi64x(static_cast<long long>(K::by64hi), static_cast<long long>(K::by64lo));
    const uint8_t *p = pRef;
    size_t n = nRef;
    __m128i a = _mm_xor_si128(load(p), _mm_cvtsi64_si128(static_cast<long long>(start)));
    __m128i b = load(p + 16), c = load(p + 32), d = load(p + 48);
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        a = _mm_xor_si128(fold(a, k64), load(p));
        b = _mm_xor_si128(fold(b, k64), load(p + 16));
        c = _mm_xor_si128(fold(c, k64), load(p + 32));
        d = _mm_xor_si128(fold(d, k64), load(p + 48));
    }
    // Four blocks, 16 bytes apart: fold them into one as a tree, whose
    // depth (not the number of folds) is what the next step waits for.
    const __m128i k32 =
        _mm_set_epi64x(static_cast<long long>(K::by32hi), static_cast<long long>(K::by32lo));
    a = _mm_xor_si128(fold(a, k32), c);
    b = _mm_xor_si128(fold(b, k32), d);
    a = _mm_xor_si128(fold(a, k16), b);
    pRef = p;
    nRef = n;
    return foldBlocks<kPoly>(a, pRef, nRef);
}

// The same with 256-bit registers (VPCLMULQDQ): eight streams, 128 bytes
// apart, two per register. Needs n >= 256.
[[gnu::target("vpclmulqdq,avx2")]] inline __m256i fold(__m256i v, __m256i k) {
    return _mm256_xor_si256(_mm256_clmulepi64_epi128(v, k, 0x00),
                            _mm256_clmulepi64_epi128(v, k, 0x11));
}

[[gnu::target("avx2")]] inline __m256i load256(const uint8_t *p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
}

[[gnu::target("avx2")]] inline void store256(uint8_t *p, __m256i v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), v);
}

// Both halves of a 256-bit register set to the same fold constant.
[[gnu::target("avx2")]] inline __m256i twice(uint64_t lo, uint64_t hi) {
    return _mm256_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo),
                             static_cast<long long>(hi), static_cast<long long>(lo));
}

// The four streams' eight blocks, two per register, 16 bytes apart,
// folded into one as a tree (a onto c and b onto d, 64 bytes on; a onto
// b, 32 bytes on; then the two halves): three folds deep, not seven.
template <uint64_t kPoly>
[[gnu::target("vpclmulqdq,avx2,pclmul")]] __m128i foldFour(__m256i a, __m256i b, __m256i c,
                                                           __m256i d) {
    using K = FoldConstants<kPoly>;
    a = _mm256_xor_si256(fold(a, twice(K::by64lo, K::by64hi)), c);
    b = _mm256_xor_si256(fold(b, twice(K::by64lo, K::by64hi)), d);
    a = _mm256_xor_si256(fold(a, twice(K::by32lo, K::by32hi)), b);
    const __m128i k16 =
        _mm_set_epi64x(static_cast<long long>(K::by16hi), static_cast<long long>(K::by16lo));
    return _mm_xor_si128(fold(_mm256_castsi256_si128(a), k16), _mm256_extracti128_si256(a, 1));
}

template <uint64_t kPoly>
[[gnu::target("vpclmulqdq,avx2,pclmul")]] __m128i foldWide(uint64_t start, const uint8_t *&pRef,
                                                           size_t &nRef) {
    using K = FoldConstants<kPoly>;
    const __m256i k128 = twice(K::by128lo, K::by128hi);
    const uint8_t *p = pRef;
    size_t n = nRef;
    __m256i a = _mm256_xor_si256(
        load256(p), _mm256_zextsi128_si256(_mm_cvtsi64_si128(static_cast<long long>(start))));
    __m256i b = load256(p + 32), c = load256(p + 64), d = load256(p + 96);
    p += 128;
    n -= 128;
    for (; n >= 128; p += 128, n -= 128) {
        a = _mm256_xor_si256(fold(a, k128), load256(p));
        b = _mm256_xor_si256(fold(b, k128), load256(p + 32));
        c = _mm256_xor_si256(fold(c, k128), load256(p + 64));
        d = _mm256_xor_si256(fold(d, k128), load256(p + 96));
    }
    pRef = p;
    nRef = n;
    return foldBlocks<kPoly>(foldFour<kPoly>(a, b, c, d), pRef, nRef);
}

// The tail of t (1..15) bytes after the block v, folded into it: the
// first t bytes of v, behind 16 - t zero bytes (which add nothing), fold
// forward onto the last 16 - t bytes of v followed by the tail. `end` is
// where the tail ends; the 16 bytes before it are readable.
alignas(16) constexpr uint8_t kShiftMasks[48] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,   12,   13,   14,   15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};

template <uint64_t kPoly>
[[gnu::target("pclmul,ssse3,sse4.1")]] __m128i foldTail(__m128i v, const uint8_t *end, size_t t) {
    using K = FoldConstants<kPoly>;
    const __m128i k16 =
        _mm_set_epi64x(static_cast<long long>(K::by16hi), static_cast<long long>(K::by16lo));
    // Byte i of `head` is v[i - (16 - t)] (zero below); of `rest`, v[i + t]
    // below 16 - t, and from there the mask's top bit picks the tail.
    const __m128i toHead = load(kShiftMasks + t), toRest = load(kShiftMasks + 16 + t);
    const __m128i head = _mm_shuffle_epi8(v, toHead);
    const __m128i rest = _mm_blendv_epi8(_mm_shuffle_epi8(v, toRest), load(end - 16), toRest);
    return _mm_xor_si128(fold(head, k16), rest);
}

// All 128 bits in reverse order: the folded block holds the data's
// polynomial reflected (the first bit is the highest power), and the
// reduction below is plain polynomial arithmetic.
[[gnu::target("ssse3")]] __m128i reverseBits(__m128i v) {
    alignas(16) static constexpr uint8_t kLowNibble[16] = {0x00, 0x80, 0x40, 0xc0, 0x20, 0xa0,
                                                           0x60, 0xe0, 0x10, 0x90, 0x50, 0xd0,
                                                           0x30, 0xb0, 0x70, 0xf0};
    alignas(16) static constexpr uint8_t kHighNibble[16] = {0x0, 0x8, 0x4, 0xc, 0x2, 0xa, 0x6, 0xe,
                                                            0x1, 0x9, 0x5, 0xd, 0x3, 0xb, 0x7, 0xf};
    alignas(16) static constexpr uint8_t kBytesBackwards[16] = {15, 14, 13, 12, 11, 10, 9, 8,
                                                                7,  6,  5,  4,  3,  2,  1, 0};
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i low = _mm_and_si128(v, nibble),
                  high = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
    const __m128i bytes = _mm_or_si128(_mm_shuffle_epi8(load(kLowNibble), low),
                                       _mm_shuffle_epi8(load(kHighNibble), high));
    return _mm_shuffle_epi8(bytes, load(kBytesBackwards));
}

// Polynomial long division: the quotient of a by m.
constexpr uint64_t polyDiv(Wide a, uint64_t m) {
    const uint32_t dm = degree(m);
    uint64_t q = 0;
    for (uint32_t d = degree(a); a >> dm && d >= dm; --d)
        if (a >> d & 1) {
            a ^= static_cast<Wide>(m) << (d - dm);
            q |= uint64_t{1} << (d - dm);
        }
    return q;
}

// The CRC (from zero) of the 16 bytes of `block`, by carry-less
// multiplication: the tables, at a few dozen scattered lines each, are
// mostly out of the cache by the time a packet's payload went through it.
// With M the block's polynomial, the CRC is M x^W mod P, reflected:
//   T = M_hi x^(64+W) + M_lo x^W   (x^(64+W) taken mod P: degree < 64+W)
//   U = T_hi x^64 + T_lo           (x^64 mod P: degree < 64)
//   U mod P by Barrett: q = ((U / x^W) floor(x^64 / P)) / x^(64-W),
//   exact for polynomials, and U - qP is the remainder.
template <uint64_t kPoly> struct FinishConstants {
    static constexpr unsigned W = degree(kPoly);
    static_assert(W % 8 == 0 && W <= 32, "byte shifts, and U below 64 bits");
    static constexpr uint64_t k1 = polyMod(Wide{1} << (64 + W), kPoly);
    static constexpr uint64_t k2 = polyMod(Wide{1} << 64, kPoly);
    static constexpr uint64_t mu = polyDiv(Wide{1} << 64, kPoly);
};

template <uint64_t kPoly>
[[gnu::target("pclmul,ssse3,sse4.1")]] uint64_t crcOfBlock(__m128i reversedBlock) {
    using K = FinishConstants<kPoly>;
    const __m128i m = reversedBlock;
    const __m128i k = _mm_set_epi64x(static_cast<long long>(K::k2), static_cast<long long>(K::k1));
    const __m128i t = _mm_xor_si128(_mm_clmulepi64_si128(m, k, 0x01),
                                    _mm_slli_si128(_mm_move_epi64(m), K::W / 8));
    const __m128i u = _mm_xor_si128(_mm_clmulepi64_si128(t, k, 0x11), _mm_move_epi64(t));
    const __m128i b = _mm_set_epi64x(static_cast<long long>(kPoly), static_cast<long long>(K::mu));
    const __m128i q =
        _mm_srli_si128(_mm_clmulepi64_si128(_mm_srli_epi64(u, K::W), b, 0x00), (64 - K::W) / 8);
    const __m128i r = _mm_xor_si128(u, _mm_clmulepi64_si128(q, b, 0x10));
    // Reflected, the remainder's W bits end up on top.
    const __m128i reflected = _mm_srli_si128(reverseBits(r), 16 - K::W / 8);
    return static_cast<uint64_t>(_mm_cvtsi128_si64(reflected)) & ((uint64_t{1} << K::W) - 1);
}

const bool kHaveClmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("ssse3") &&
                        __builtin_cpu_supports("sse4.1");
const bool kHaveWideClmul =
    kHaveClmul && __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx2");

bool canFold(size_t n) {
    return (kHaveWideClmul && n >= 256) || (kHaveClmul && n >= 64);
}

// Folds n >= 16 bytes, `start` XORed into the first, one block at a time:
// for what is too short for the four streams.
template <uint64_t kPoly>
[[gnu::target("pclmul,sse2")]] __m128i foldOneStream(uint64_t start, const uint8_t *&p, size_t &n) {
    const __m128i first = _mm_xor_si128(load(p), _mm_cvtsi64_si128(static_cast<long long>(start)));
    p += 16;
    n -= 16;
    return foldBlocks<kPoly>(first, p, n);
}

// Folds `bytes` (at least 16; canFold unless kPoly is the joint
// polynomial) modulo kPoly, `start` XORed into the first, into one block,
// bit-reversed for crcOfBlock.
template <uint64_t kPoly> __m128i foldAll(uint64_t start, std::span<const uint8_t> bytes) {
    const uint8_t *p = bytes.data();
    size_t n = bytes.size();
    __m128i v = kHaveWideClmul && n >= 256 ? foldWide<kPoly>(start, p, n)
                : n >= 64                  ? foldNarrow<kPoly>(start, p, n)
                                           : foldOneStream<kPoly>(start, p, n);
    if (n)
        v = foldTail<kPoly>(v, p + n, n);
    return reverseBits(v);
}

template <class T, T R, uint64_t kPoly>
T foldedUpdate(const Tables<T, R> &tab, T crc, std::span<const uint8_t> bytes) {
    if (canFold(bytes.size()))
        return static_cast<T>(crcOfBlock<kPoly>(foldAll<kPoly>(crc, bytes)));
    return update(tab, crc, bytes);
}
#else
template <class T, T R, uint64_t>
T foldedUpdate(const Tables<T, R> &tab, T crc, std::span<const uint8_t> bytes) {
    return update(tab, crc, bytes);
}
#endif

} // namespace

uint32_t crc32Update(uint32_t crc, std::span<const uint8_t> bytes) {
    return foldedUpdate<uint32_t, 0xedb88320u, kPoly32>(kCrc32, crc, bytes);
}

uint16_t crc16Update(uint16_t crc, std::span<const uint8_t> bytes) {
    return foldedUpdate<uint16_t, 0xd008u, kPoly16>(kCrc16, crc, bytes);
}

namespace {

// Both CRCs in one pass, the CRC-32 seeing byte 4 XORed with crc32Flip4.
// False when `bytes` is too short for that to pay.
bool jointUpdate(uint32_t *crc32, uint16_t *crc16, std::span<const uint8_t> bytes,
                 uint8_t crc32Flip4) {
#if defined(__x86_64__)
    // From 64 bytes to a few hundred, each CRC folded on its own costs
    // less than the joint start value. Below 64 bytes (a header-only
    // packet, an ACK, a short SEND) the alternative is the tables, twice:
    // one joint fold is a few dozen instructions against a few hundred.
    const size_t n = bytes.size();
    const bool shortJoint = kHaveClmul && n >= 16 && n < 64;
    if (!shortJoint && (n < 256 || !canFold(n)))
        return false;
    const __m128i block =
        foldAll<kPoly48>(jointStart(*crc32, *crc16) ^ kCrc32OnlyByte4.t[crc32Flip4], bytes);
    *crc32 = static_cast<uint32_t>(crcOfBlock<kPoly32>(block));
    *crc16 = static_cast<uint16_t>(crcOfBlock<kPoly16>(block));
    return true;
#else
    return false;
#endif
}

} // namespace

void crc32And16Update(uint32_t *crc32, uint16_t *crc16, std::span<const uint8_t> bytes) {
    if (jointUpdate(crc32, crc16, bytes, 0))
        return;
    *crc32 = crc32Update(*crc32, bytes);
    *crc16 = crc16Update(*crc16, bytes);
}

namespace {

// Each CRC on its own over `bytes`, the CRC-32 seeing bytes[at] XORed
// with `flip`.
void updateFlippingOne(uint32_t *crc32, uint16_t *crc16, std::span<const uint8_t> bytes, size_t at,
                       uint8_t flip) {
    const uint8_t flipped = bytes[at] ^ flip;
    *crc32 = crc32Update(crc32Update(*crc32, bytes.first(at)), std::span(&flipped, 1));
    *crc32 = crc32Update(*crc32, bytes.subspan(at + 1));
    *crc16 = crc16Update(*crc16, bytes);
}

} // namespace

void crc32And16Update(uint32_t *crc32, uint16_t *crc16, std::span<const uint8_t> bytes,
                      uint8_t crc32Flip4) {
    if (!jointUpdate(crc32, crc16, bytes, crc32Flip4))
        updateFlippingOne(crc32, crc16, bytes, 4, crc32Flip4);
}

JointCrcStream::JointCrcStream(uint32_t crc32, uint16_t crc16, uint8_t crc32Flip4)
    : crc32_(crc32), crc16_(crc16), flip_(crc32Flip4) {}

#if defined(__x86_64__)
// Folds whole groups of 128 bytes into the four streams, the first group
// of all with the start value; copies them to dst on the way, if any.
[[gnu::target("vpclmulqdq,avx2,pclmul")]] void
JointCrcStream::foldGroups(uint8_t *dst, const uint8_t *src, size_t groups) {
    using K = FoldConstants<kPoly48>;
    const __m256i k128 = twice(K::by128lo, K::by128hi);
    __m256i a, b, c, d;
    if (!started_) {
        const uint64_t start = jointStart(crc32_, crc16_) ^ kCrc32OnlyByte4.t[flip_];
        a = load256(src), b = load256(src + 32), c = load256(src + 64), d = load256(src + 96);
        if (dst) {
            store256(dst, a), store256(dst + 32, b), store256(dst + 64, c), store256(dst + 96, d);
            dst += 128;
        }
        a = _mm256_xor_si256(
            a, _mm256_zextsi128_si256(_mm_cvtsi64_si128(static_cast<long long>(start))));
        src += 128;
        --groups;
        started_ = true;
    } else {
        a = load256(accumulators_), b = load256(accumulators_ + 32);
        c = load256(accumulators_ + 64), d = load256(accumulators_ + 96);
    }
    for (; groups; --groups, src += 128) {
        const __m256i w = load256(src), x = load256(src + 32), y = load256(src + 64),
                      z = load256(src + 96);
        if (dst) {
            store256(dst, w), store256(dst + 32, x), store256(dst + 64, y), store256(dst + 96, z);
            dst += 128;
        }
        a = _mm256_xor_si256(fold(a, k128), w);
        b = _mm256_xor_si256(fold(b, k128), x);
        c = _mm256_xor_si256(fold(c, k128), y);
        d = _mm256_xor_si256(fold(d, k128), z);
    }
    store256(accumulators_, a), store256(accumulators_ + 32, b);
    store256(accumulators_ + 64, c), store256(accumulators_ + 96, d);
}

void JointCrcStream::addFolding(uint8_t *dst, const uint8_t *src, size_t n) {
    const bool copy = dst != src;
    if (pendingBytes_) { // complete the group begun before
        const size_t take = std::min(n, sizeof(pending_) - pendingBytes_);
        std::memcpy(pending_ + pendingBytes_, src, take);
        if (copy)
            std::memcpy(dst, src, take);
        pendingBytes_ += take, src += take, dst += take, n -= take;
        if (pendingBytes_ < sizeof(pending_))
            return;
        foldGroups(nullptr, pending_, 1);
        pendingBytes_ = 0;
    }
    const size_t whole = n / 128 * 128;
    if (whole)
        foldGroups(copy ? dst : nullptr, src, whole / 128);
    src += whole, dst += whole, n -= whole;
    std::memcpy(pending_, src, n);
    if (copy)
        std::memcpy(dst, src, n);
    pendingBytes_ = n;
}

[[gnu::target("vpclmulqdq,avx2,pclmul,ssse3,sse4.1")]] void
JointCrcStream::finishFolding(uint32_t *crc32, uint16_t *crc16) {
    if (!started_) { // fewer than 128 bytes: all of them are here
        finishPending(crc32, crc16);
        return;
    }
    __m128i v = foldFour<kPoly48>(load256(accumulators_), load256(accumulators_ + 32),
                                  load256(accumulators_ + 64), load256(accumulators_ + 96));
    const uint8_t *p = pending_;
    size_t n = pendingBytes_;
    v = foldBlocks<kPoly48>(v, p, n);
    if (n) { // foldTail reads the 16 bytes that end with the tail
        alignas(16) uint8_t last[16] = {};
        std::memcpy(last + 16 - n, p, n);
        v = foldTail<kPoly48>(v, last + 16, n);
    }
    const __m128i block = reverseBits(v);
    *crc32 = static_cast<uint32_t>(crcOfBlock<kPoly32>(block));
    *crc16 = static_cast<uint16_t>(crcOfBlock<kPoly16>(block));
}
#endif

// The stream so far is all in pending_: both CRCs of it at once.
void JointCrcStream::finishPending(uint32_t *crc32, uint16_t *crc16) const {
    *crc32 = crc32_, *crc16 = crc16_;
    const std::span<const uint8_t> bytes(pending_, pendingBytes_);
    if (bytes.size() > 4)
        crc32And16Update(crc32, crc16, bytes, flip_);
    else
        crc32And16Update(crc32, crc16, bytes);
}

void JointCrcStream::add(uint8_t *dst, const uint8_t *src, size_t n) {
    if (!n)
        return;
#if defined(__x86_64__)
    if (kHaveWideClmul) {
        addFolding(dst, src, n);
        return;
    }
#endif
    // Without the wide fold: copy, and gather the first 128 bytes (most
    // packets' whole stream: headers and a short payload), which finish()
    // takes in one joint pass rather than each piece twice by the tables.
    if (dst != src)
        std::memcpy(dst, src, n);
    if (seen_ + n <= sizeof(pending_)) {
        std::memcpy(pending_ + pendingBytes_, src, n);
        pendingBytes_ += n;
        seen_ += n;
        return;
    }
    if (pendingBytes_) { // the stream outgrew it: on piece by piece
        const size_t gathered = pendingBytes_;
        pendingBytes_ = 0;
        seen_ = 0;
        updateRunning(std::span<const uint8_t>(pending_, gathered));
    }
    updateRunning(std::span<const uint8_t>(src, n));
}

// The running values go on over the next piece; the one that holds the
// stream's byte 4 takes the flip.
void JointCrcStream::updateRunning(std::span<const uint8_t> bytes) {
    if (seen_ <= 4 && seen_ + bytes.size() > 4)
        updateFlippingOne(&crc32_, &crc16_, bytes, 4 - seen_, flip_);
    else
        crc32And16Update(&crc32_, &crc16_, bytes);
    seen_ += bytes.size();
}

void JointCrcStream::finish(uint32_t *crc32, uint16_t *crc16) {
#if defined(__x86_64__)
    if (kHaveWideClmul) {
        finishFolding(crc32, crc16);
        return;
    }
#endif
    if (pendingBytes_ || !seen_) {
        finishPending(crc32, crc16);
        return;
    }
    *crc32 = crc32_;
    *crc16 = crc16_;
}

} // namespace pib::iba
