/*
 * The Montgomery product with AVX-512 IFMA, in radix 2^52, and its digit layout.
 *
 * Why: GMP's mpn layer multiplies 64-bit limbs one scalar mulx at a time; at 2048 bits a
 * Montgomery product (mpn_mul_n, then the REDC loop) costs about 1.2 us, and the kernels spend
 * nearly all their time there. The IFMA instructions (vpmadd52luq / vpmadd52huq) multiply
 * eight pairs of 52-bit digits per instruction and add the low or the high 52 bits of each
 * 104-bit product into 64-bit lanes, so one digit of b times all of a is ceil(k / 8)
 * instructions, and the 12 spare bits of each lane absorb the carries of a whole product. This
 * is the almost-Montgomery multiplication of Gueron and Krasnov ("Accelerating big integer
 * arithmetic using Intel IFMA extensions", ARITH 2016), as in OpenSSL's rsaz-2k-avx512, written
 * here with intrinsics for every size up to IFMA_MAX_VECTORS vectors of eight digits.
 *
 * Layout: a value is 8 nz 64-bit words, digit i (bits 52 i .. 52 i + 51) in word i, digits at
 * and above kd zero. The Montgomery radix is R' = 2^(52 kd) with kd the fewest digits for which
 * 4 m < R': then inputs below 2 m give an output below 2 m (ab + qm < 4m^2 + R'm, divided by
 * R'), so values stay "almost reduced" between products and are reduced below m only when they
 * leave the layout (ifma_to_limbs). Every function here runs in time independent of the values
 * (no branch or address depends on them), so the same product serves the key owner's secret
 * exponentiations (owner.c).
 *
 * Dispatch: the functions are compiled for AVX-512 IFMA with a target attribute, not global
 * flags, so the module still builds for and runs on any x86-64 (or other) CPU; ifma_usable()
 * says once per process whether this CPU has the instructions and P2PBOOST_IFMA does not
 * switch them off, and the Modulus type (modulus.c) chooses its product from that and the size.
 */
#include "ifma.h"

#include <stdlib.h>
#include <string.h>

#define M52 ((uint64_t)0xfffffffffffffULL)

#if IFMA_COMPILED

#include <immintrin.h>

#define IFMA_TARGET __attribute__((target("avx512f,avx512vl,avx512ifma")))
#define IFMA_INLINE static inline __attribute__((always_inline)) IFMA_TARGET

int ifma_supported(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("avx512ifma");
    }
    return known;
}

int ifma_usable(void)
{
    static int known = -1;
    if (known < 0) {
        const char *env = getenv("P2PBOOST_IFMA");
        int off = env && (strcmp(env, "0") == 0 || strcmp(env, "off") == 0 ||
                          strcmp(env, "no") == 0 || strcmp(env, "false") == 0);
        known = !off && ifma_supported();
    }
    return known;
}

/*
 * Carry propagation of a product's lanes into 52-bit digits, without a serial loop over the
 * lanes: split each lane into its digit and its carry (lane >> 52, below 2^12), add each carry
 * to the next lane; every lane is then below 2^52 + 2^12, so at most one more carry leaves it.
 * Which lanes receive that last carry is an integer addition over bit masks (one bit a lane):
 * a lane generates a carry when above 2^52 - 1 and passes an incoming one on when equal to it,
 * so the lanes receiving one are ((G << 1) + P) ^ P. Masks and additions only: constant time.
 */
IFMA_INLINE void normalise(int nz, __m512i *acc)
{
    const __m512i mask = _mm512_set1_epi64((long long)M52);
    const __m512i one = _mm512_set1_epi64(1);
    __m512i carry_prev = _mm512_setzero_si512();
    unsigned __int128 gen = 0, prop = 0;
    for (int j = 0; j < nz; j++) {
        __m512i carry = _mm512_srli_epi64(acc[j], 52);
        __m512i in = _mm512_alignr_epi64(carry, carry_prev, 7); /* carry_prev[7], carry[0..6] */
        carry_prev = carry;
        acc[j] = _mm512_add_epi64(_mm512_and_si512(acc[j], mask), in);
        gen |= (unsigned __int128)_mm512_cmpgt_epu64_mask(acc[j], mask) << (8 * j);
        prop |= (unsigned __int128)_mm512_cmpeq_epu64_mask(acc[j], mask) << (8 * j);
    }
    unsigned __int128 receive = ((gen << 1) + prop) ^ prop;
    for (int j = 0; j < nz; j++) {
        __mmask8 k = (__mmask8)(receive >> (8 * j));
        acc[j] = _mm512_and_si512(_mm512_mask_add_epi64(acc[j], k, acc[j], one), mask);
    }
}

/*
 * r = a b R'^-1 mod m, below 2 m when a and b are (r may alias a or b). Digit by digit of b:
 * add a b_i to the lanes (low halves), choose y so that the lowest lane becomes a multiple of
 * 2^52, add m y, drop the lowest lane (a shift by one lane across the vectors), then add the
 * high halves, which now land on their own lanes.
 *
 * The choice of y is the one serial step, so the lowest lane is followed in scalars: `base` is
 * the vector's lowest lane and c0 the carry out of the dropped lanes, which the vector never
 * receives. The next digit's lowest lane is this digit's second lane (read from the vector
 * as it stood before this digit, so that read waits for the previous digit's vector work, not
 * this one's) plus the four products this digit adds to it, made again in scalars. y for digit
 * i + 1 then waits for scalar multiplications and for the vectors of digit i - 1 only, which
 * took a 2048-bit product from 0.375 to 0.32 us here (the whole-vector path is otherwise
 * throughput-bound).
 */
IFMA_INLINE void amm(int nz, int K, const IfmaModulus *f, uint64_t *const *r,
                     const uint64_t *const *a, const uint64_t *const *b)
{
    __m512i acc[2][IFMA_MAX_VECTORS], av[2][IFMA_MAX_VECTORS], mv[IFMA_MAX_VECTORS];
    uint64_t a0[2], a1[2], c0[2], base[2];
    const uint64_t *m = f->m;
    const uint64_t m0 = m[0], m1 = m[1], k0 = f->k0;
    for (int j = 0; j < nz; j++)
        mv[j] = _mm512_loadu_si512((const void *)(m + 8 * j));
    for (int k = 0; k < K; k++) {
        for (int j = 0; j < nz; j++) {
            acc[k][j] = _mm512_setzero_si512();
            av[k][j] = _mm512_loadu_si512((const void *)(a[k] + 8 * j));
        }
        a0[k] = a[k][0];
        a1[k] = a[k][1];
        c0[k] = base[k] = 0;
    }
    const int kd = f->kd;
    for (int i = 0; i < kd; i++) {
        for (int k = 0; k < K; k++) {
            const uint64_t bi = b[k][i];
            const __m512i bv = _mm512_set1_epi64((long long)bi);
            const uint64_t lane1 =
                (uint64_t)_mm_extract_epi64(_mm512_castsi512_si128(acc[k][0]), 1);
            unsigned __int128 ab = (unsigned __int128)a0[k] * bi;
            uint64_t t = base[k] + c0[k] + ((uint64_t)ab & M52);
            const uint64_t y = (t * k0) & M52;
            const __m512i yv = _mm512_set1_epi64((long long)y);
            unsigned __int128 my = (unsigned __int128)m0 * y;
            c0[k] = (t + ((uint64_t)my & M52)) >> 52;
            base[k] = lane1 + ((a1[k] * bi) & M52) + ((m1 * y) & M52) + (uint64_t)(ab >> 52) +
                      (uint64_t)(my >> 52);
            __m512i hi[IFMA_MAX_VECTORS], *x = acc[k];
            for (int j = 0; j < nz; j++) {
                x[j] = _mm512_madd52lo_epu64(x[j], av[k][j], bv);
                hi[j] = _mm512_madd52hi_epu64(_mm512_setzero_si512(), av[k][j], bv);
                x[j] = _mm512_madd52lo_epu64(x[j], mv[j], yv);
            }
            for (int j = 0; j < nz - 1; j++)
                x[j] = _mm512_alignr_epi64(x[j + 1], x[j], 1);
            x[nz - 1] = _mm512_alignr_epi64(_mm512_setzero_si512(), x[nz - 1], 1);
            for (int j = 0; j < nz; j++)
                x[j] = _mm512_madd52hi_epu64(_mm512_add_epi64(x[j], hi[j]), mv[j], yv);
        }
    }
    for (int k = 0; k < K; k++) {
        /* the lowest lane still lacks the scalar's carry */
        acc[k][0] = _mm512_add_epi64(acc[k][0], _mm512_maskz_set1_epi64(1, (long long)c0[k]));
        normalise(nz, acc[k]);
        for (int j = 0; j < nz; j++)
            _mm512_storeu_si512((void *)(r[k] + 8 * j), acc[k][j]);
    }
}

/* One instance per vector count and number of products, so that each keeps its lanes in
 * registers; two independent products interleaved fill the pipeline a single product's
 * serial choice of y leaves idle (0.33 us for one 2048-bit product here, 0.27 us each for two
 * at once; 1366 bits 0.20 and 0.15 us). */
#define AMM_INSTANCE(NZ)                                                                       \
    static IFMA_TARGET void amm_##NZ(const IfmaModulus *f, uint64_t *const *r,                \
                                     const uint64_t *const *a, const uint64_t *const *b)       \
    {                                                                                          \
        amm(NZ, 1, f, r, a, b);                                                                \
    }                                                                                          \
    static IFMA_TARGET void amm2_##NZ(const IfmaModulus *f, uint64_t *const *r,               \
                                      const uint64_t *const *a, const uint64_t *const *b)      \
    {                                                                                          \
        amm(NZ, 2, f, r, a, b);                                                                \
    }
AMM_INSTANCE(1)
AMM_INSTANCE(2)
AMM_INSTANCE(3)
AMM_INSTANCE(4)
AMM_INSTANCE(5)
AMM_INSTANCE(6)
AMM_INSTANCE(7)
AMM_INSTANCE(8)
AMM_INSTANCE(9)
AMM_INSTANCE(10)
AMM_INSTANCE(11)
AMM_INSTANCE(12)
AMM_INSTANCE(13)
AMM_INSTANCE(14)
AMM_INSTANCE(15)
AMM_INSTANCE(16)

typedef void (*AmmFn)(const IfmaModulus *, uint64_t *const *, const uint64_t *const *,
                      const uint64_t *const *);

static const AmmFn amm_by_size[2][IFMA_MAX_VECTORS + 1] = {
    {NULL, amm_1, amm_2, amm_3, amm_4, amm_5, amm_6, amm_7, amm_8, amm_9, amm_10, amm_11,
     amm_12, amm_13, amm_14, amm_15, amm_16},
    {NULL, amm2_1, amm2_2, amm2_3, amm2_4, amm2_5, amm2_6, amm2_7, amm2_8, amm2_9, amm2_10,
     amm2_11, amm2_12, amm2_13, amm2_14, amm2_15, amm2_16},
};

void ifma_mul(const IfmaModulus *f, uint64_t *r, const uint64_t *a, const uint64_t *b)
{
    amm_by_size[0][f->nz](f, &r, &a, &b);
}

/* Pairs stop paying where two products' lanes no longer fit the 32 vector registers: measured
 * here, one 4160-bit product (11 vectors) 1.24 us, 1.14 us each in pairs; 4576 bits (12) 1.38
 * us alone, 1.56 us each in pairs. */
#define PAIR_MAX_VECTORS 11

void ifma_mul2(const IfmaModulus *f, uint64_t *r0, const uint64_t *a0, const uint64_t *b0,
               uint64_t *r1, const uint64_t *a1, const uint64_t *b1)
{
    if (f->nz > PAIR_MAX_VECTORS) {
        ifma_mul(f, r0, a0, b0);
        ifma_mul(f, r1, a1, b1);
        return;
    }
    uint64_t *r[2] = {r0, r1};
    const uint64_t *a[2] = {a0, a1}, *b[2] = {b0, b1};
    amm_by_size[1][f->nz](f, r, a, b);
}

/* Select table[d] (entries of `words` words) into out, loading every entry in full and
 * keeping the wanted one with an AND against an all-ones or all-zeros word: the addresses read
 * and the instructions do not depend on d. (A masked move is not used: compilers fold it into
 * a masked load, which need not read the memory of the entries it masks off.) */
static IFMA_TARGET void select_entry(uint64_t *out, const uint64_t *table, size_t entries,
                                     size_t words, uint64_t d)
{
    for (size_t v = 0; v < words; v += 8) {
        __m512i x = _mm512_setzero_si512();
        for (size_t e = 0; e < entries; e++) {
            uint64_t diff = (uint64_t)e ^ d;
            uint64_t keep = ((diff | ((uint64_t)0 - diff)) >> 63) - 1; /* ~0 when e == d */
            __m512i entry = _mm512_loadu_si512((const void *)(table + e * words + v));
            x = _mm512_or_si512(x, _mm512_and_si512(entry, _mm512_set1_epi64((long long)keep)));
        }
        _mm512_storeu_si512((void *)(out + v), x);
    }
}

#else /* not x86-64 with a compiler that knows the instructions: the mpn path only */

int ifma_supported(void)
{
    return 0;
}

int ifma_usable(void)
{
    return 0;
}

void ifma_mul(const IfmaModulus *f, uint64_t *r, const uint64_t *a, const uint64_t *b)
{
    (void)f, (void)r, (void)a, (void)b;
}

void ifma_mul2(const IfmaModulus *f, uint64_t *r0, const uint64_t *a0, const uint64_t *b0,
               uint64_t *r1, const uint64_t *a1, const uint64_t *b1)
{
    (void)f, (void)r0, (void)a0, (void)b0, (void)r1, (void)a1, (void)b1;
}

static void select_entry(uint64_t *out, const uint64_t *table, size_t entries, size_t words,
                         uint64_t d)
{
    (void)out, (void)table, (void)entries, (void)words, (void)d;
}

#endif

/* --- the layout: set-up and conversions (plain C, constant time) --------------------------- */

int ifma_digits_for(mp_size_t n, const mp_limb_t *m)
{
    /* the fewest digits kd with 4 m < 2^(52 kd): bits(m) + 2 <= 52 kd */
    mp_size_t top = n;
    while (top > 0 && m[top - 1] == 0)
        top--;
    size_t bits = top ? 64 * (size_t)(top - 1) + (64 - (size_t)__builtin_clzll(m[top - 1])) : 0;
    return (int)((bits + 2 + 51) / 52);
}

int ifma_setup(IfmaModulus *f, const mp_limb_t *m, mp_size_t n)
{
    int kd = ifma_digits_for(n, m);
    int nz = (kd + 7) / 8;
    if (nz < 1 || nz > IFMA_MAX_VECTORS)
        return -1;
    f->kd = kd;
    f->nz = nz;
    f->m = calloc((size_t)(8 * nz), sizeof(uint64_t));
    if (!f->m)
        return -1;
    ifma_from_limbs(f, f->m, m, n);
    /* k0 = -m^-1 mod 2^52, by Newton's iteration modulo 2^64 */
    uint64_t inv = 1;
    for (int i = 0; i < 7; i++)
        inv *= 2 - m[0] * inv;
    f->k0 = ((uint64_t)0 - inv) & M52;
    return 0;
}

void ifma_clear(IfmaModulus *f)
{
    free(f->m);
    f->m = NULL;
    f->nz = 0;
}

void ifma_from_limbs(const IfmaModulus *f, uint64_t *d, const mp_limb_t *x, mp_size_t n)
{
    size_t words = 8 * (size_t)f->nz;
    for (size_t i = 0; i < words; i++) {
        size_t bit = 52 * i, w = bit / 64, off = bit % 64;
        uint64_t v = 0;
        if (w < (size_t)n) {
            v = x[w] >> off;
            if (off > 12 && w + 1 < (size_t)n)
                v |= x[w + 1] << (64 - off);
        }
        d[i] = v & M52;
    }
}

void ifma_to_limbs(const IfmaModulus *f, mp_limb_t *x, mp_size_t n, const uint64_t *d)
{
    /* d < 2 m: subtract m, keep the difference unless it borrowed (a masked select) */
    uint64_t red[8 * IFMA_MAX_VECTORS];
    uint64_t borrow = 0;
    for (int i = 0; i < f->kd; i++) {
        uint64_t v = d[i] - f->m[i] - borrow;
        borrow = v >> 63; /* digits and m's digits are below 2^52: the sign bit is the borrow */
        red[i] = v & M52;
    }
    uint64_t keep = (uint64_t)0 - borrow; /* all ones: d < m, keep d */
    for (mp_size_t w = 0; w < n; w++)
        x[w] = 0;
    for (int i = 0; i < f->kd; i++) {
        uint64_t v = (d[i] & keep) | (red[i] & ~keep);
        size_t bit = 52 * (size_t)i, w = bit / 64, off = bit % 64;
        if (w < (size_t)n)
            x[w] |= v << off;
        if (off > 12 && w + 1 < (size_t)n)
            x[w + 1] |= v >> (64 - off);
    }
}

/*
 * r[k] = x[k]^e R' mod m for K = 1 or 2 bases x[k] in Montgomery form (below 2 m) and one
 * exponent e of ebits bits (ceil(ebits / 64) limbs; ebits >= 1), by fixed windows of
 * IFMA_WINDOW bits from bit ebits down: every window costs IFMA_WINDOW squarings and one
 * product with a table entry chosen by a full masked scan, whatever its digit, so the time and
 * the addresses touched depend on ebits only (the exponent's public length), never on its bits
 * or on the bases. Two bases run their products in pairs (ifma_mul2). one is R' mod m; each
 * table[k] has 2^IFMA_WINDOW entries of 8 nz words. The key owner's decryption exponents go
 * through here.
 */
static void powm(const IfmaModulus *f, int K, uint64_t *const *r, const uint64_t *const *x,
                 const mp_limb_t *e, size_t ebits, const uint64_t *one, uint64_t *const *table)
{
    size_t words = 8 * (size_t)f->nz, entries = (size_t)1 << IFMA_WINDOW;
    uint64_t entry[2][8 * IFMA_MAX_VECTORS];
    for (int k = 0; k < K; k++) {
        memcpy(table[k], one, words * sizeof(uint64_t));
        memcpy(table[k] + words, x[k], words * sizeof(uint64_t));
    }
    for (size_t j = 2; j < entries; j++) {
        if (K == 2)
            ifma_mul2(f, table[0] + j * words, table[0] + (j - 1) * words, x[0],
                      table[1] + j * words, table[1] + (j - 1) * words, x[1]);
        else
            ifma_mul(f, table[0] + j * words, table[0] + (j - 1) * words, x[0]);
    }
    size_t windows = (ebits + IFMA_WINDOW - 1) / IFMA_WINDOW;
    for (size_t w = windows; w-- > 0;) {
        size_t low = w * IFMA_WINDOW;
        uint64_t d = 0;
        for (int b = IFMA_WINDOW - 1; b >= 0; b--) {
            size_t bit = low + (size_t)b;
            uint64_t v = bit < ebits ? (e[bit / 64] >> (bit % 64)) & 1 : 0;
            d = (d << 1) | v;
        }
        if (w == windows - 1) {
            for (int k = 0; k < K; k++)
                select_entry(r[k], table[k], entries, words, d);
            continue;
        }
        for (int q = 0; q < IFMA_WINDOW; q++) {
            if (K == 2)
                ifma_mul2(f, r[0], r[0], r[0], r[1], r[1], r[1]);
            else
                ifma_mul(f, r[0], r[0], r[0]);
        }
        for (int k = 0; k < K; k++)
            select_entry(entry[k], table[k], entries, words, d);
        if (K == 2)
            ifma_mul2(f, r[0], r[0], entry[0], r[1], r[1], entry[1]);
        else
            ifma_mul(f, r[0], r[0], entry[0]);
    }
}

void ifma_powm(const IfmaModulus *f, uint64_t *r, const uint64_t *x, const mp_limb_t *e,
               size_t ebits, const uint64_t *one, uint64_t *table)
{
    powm(f, 1, &r, &x, e, ebits, one, &table);
}

void ifma_powm2(const IfmaModulus *f, uint64_t *r0, const uint64_t *x0, uint64_t *r1,
                const uint64_t *x1, const mp_limb_t *e, size_t ebits, const uint64_t *one,
                uint64_t *table0, uint64_t *table1)
{
    uint64_t *r[2] = {r0, r1}, *table[2] = {table0, table1};
    const uint64_t *x[2] = {x0, x1};
    powm(f, 2, r, x, e, ebits, one, table);
}
