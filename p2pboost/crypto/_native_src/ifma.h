/*
 * The IFMA product's declarations (ifma.c), apart from Python's headers so that the product
 * can be built and timed on its own. A Modulus (native.h) uses it when ifma_usable() and its
 * size allow; values in this layout are 8 nz 64-bit words of 52-bit digits.
 */
#ifndef P2PBOOST_IFMA_H
#define P2PBOOST_IFMA_H

#include <gmp.h>
#include <stdint.h>

/* Whether this build has the IFMA functions at all (x86-64 with GCC or Clang; defining
 * P2PBOOST_NO_IFMA builds the mpn path alone, as on other CPUs). */
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8)) &&   \
    !defined(P2PBOOST_NO_IFMA)
#define IFMA_COMPILED 1
#else
#define IFMA_COMPILED 0
#endif

#define IFMA_MAX_VECTORS 16 /* up to 128 digits: moduli up to 6654 bits */
#define IFMA_WINDOW 5       /* bits per window of the constant-time exponentiation */

typedef struct {
    int kd;      /* digits of the radix R' = 2^(52 kd): the fewest with 4 m < R' */
    int nz;      /* vectors of eight digits per value: ceil(kd / 8); 0 when not set up */
    uint64_t k0; /* -m^-1 mod 2^52 */
    uint64_t *m; /* the modulus, 8 nz digits (malloc'd) */
} IfmaModulus;

/* This CPU has AVX-512 F, VL and IFMA (and this build the functions). */
int ifma_supported(void);
/* ifma_supported() and P2PBOOST_IFMA is not 0/off/no/false: the default for new moduli. */
int ifma_usable(void);
int ifma_digits_for(mp_size_t n, const mp_limb_t *m);
int ifma_setup(IfmaModulus *f, const mp_limb_t *m, mp_size_t n);
void ifma_clear(IfmaModulus *f);
/* r = a b R'^-1 mod m (below 2 m for a, b below 2 m; r may alias a or b). */
void ifma_mul(const IfmaModulus *f, uint64_t *r, const uint64_t *a, const uint64_t *b);
/* Two independent products at once (r0 = a0 b0 R'^-1, r1 = a1 b1 R'^-1), interleaved. */
void ifma_mul2(const IfmaModulus *f, uint64_t *r0, const uint64_t *a0, const uint64_t *b0,
               uint64_t *r1, const uint64_t *a1, const uint64_t *b1);
void ifma_from_limbs(const IfmaModulus *f, uint64_t *d, const mp_limb_t *x, mp_size_t n);
void ifma_to_limbs(const IfmaModulus *f, mp_limb_t *x, mp_size_t n, const uint64_t *d);
/* r = x^e R' mod m in constant time (x in Montgomery form; see ifma.c); ifma_powm2: two bases,
 * one exponent, each with its own table of 2^IFMA_WINDOW values. */
void ifma_powm(const IfmaModulus *f, uint64_t *r, const uint64_t *x, const mp_limb_t *e,
               size_t ebits, const uint64_t *one, uint64_t *table);
void ifma_powm2(const IfmaModulus *f, uint64_t *r0, const uint64_t *x0, uint64_t *r1,
                const uint64_t *x1, const mp_limb_t *e, size_t ebits, const uint64_t *one,
                uint64_t *table0, uint64_t *table1);

#endif
