/* The key owner's operations: CRT recombination, Paillier's plaintext mask, and decryption
 * with the secret exponent: mpz_powm_sec on the mpn path, a constant-time fixed-window
 * exponentiation on the IFMA product (ifma_powm) when the ciphertext modulus uses it. */
#include "native.h"

#include <stdlib.h>

/*
 * A secret modulus (p^2 or q^2) on the IFMA product, for one decryption call. Everything that
 * touches the modulus or the ciphertext's residue runs in time independent of their values:
 * the reductions use mpn_sec_div_r (GMP's constant-time division), R' mod m and R'^2 mod m
 * included, and the product, the exponentiation and the conversions are ifma.c's.
 */
typedef struct {
    IfmaModulus f;
    mp_size_t n;          /* limbs of the modulus */
    mp_limb_t *m;         /* the modulus, n limbs */
    uint64_t *one, *r2, *unit, *x[2], *table[2]; /* two of x and table: two ciphertexts */
    mp_limb_t *num, *tp;  /* dividend (num_limbs) and mpn_sec_div_r's scratch */
    mp_size_t num_limbs, tp_limbs;
} SecretModulus;

/* Zero n words that held secrets before their memory is freed (a volatile store each, which
 * the compiler may not drop as dead). */
static void wipe(void *p, size_t words)
{
    volatile uint64_t *v = p;
    for (size_t i = 0; p && i < words; i++)
        v[i] = 0;
}

/* Free the set-up, zeroing what held the secret modulus, its constants and the powers of the
 * ciphertexts first. */
static void secret_clear(SecretModulus *s)
{
    size_t words = 8 * (size_t)s->f.nz;
    wipe(s->f.m, words);
    ifma_clear(&s->f);
    wipe(s->m, (size_t)s->n);
    free(s->m);
    if (s->one) {
        wipe(s->one, 5 * words);
        wipe(s->table[0], 2 * (words << IFMA_WINDOW));
        wipe(s->num, (size_t)s->num_limbs);
        wipe(s->tp, (size_t)s->tp_limbs);
    }
    free(s->one);
    free(s->table[0]);
    free(s->num);
    free(s->tp);
    memset(s, 0, sizeof(*s));
}

/* x mod m of x's xn limbs into s->num[0 .. n), in constant time. */
static void secret_reduce(SecretModulus *s, const mp_limb_t *x, mp_size_t xn)
{
    memset(s->num, 0, sizeof(mp_limb_t) * (size_t)s->num_limbs);
    memcpy(s->num, x, sizeof(mp_limb_t) * (size_t)xn);
    mpn_sec_div_r(s->num, s->num_limbs, s->m, s->n, s->tp);
}

/* Set up m (odd, secret) for inputs of up to input_limbs limbs. 0, or -1 (out of memory). */
static int secret_init(SecretModulus *s, const mpz_t m, mp_size_t input_limbs)
{
    memset(s, 0, sizeof(*s));
    s->n = (mp_size_t)mpz_size(m);
    s->m = calloc((size_t)s->n, sizeof(mp_limb_t));
    if (!s->m)
        return -1;
    mpz_export(s->m, NULL, -1, sizeof(mp_limb_t), 0, 0, m);
    if (ifma_setup(&s->f, s->m, s->n) < 0) {
        secret_clear(s);
        return -1;
    }
    size_t words = 8 * (size_t)s->f.nz;
    mp_size_t r2_limbs = (mp_size_t)(104 * (size_t)s->f.kd / 64 + 1);
    s->num_limbs = input_limbs > r2_limbs ? input_limbs : r2_limbs;
    if (s->num_limbs < s->n)
        s->num_limbs = s->n;
    s->one = calloc(5 * words, sizeof(uint64_t)); /* one, r2, unit, x[0], x[1] */
    s->table[0] = calloc(2 * (words << IFMA_WINDOW), sizeof(uint64_t));
    s->num = calloc((size_t)s->num_limbs, sizeof(mp_limb_t));
    s->tp_limbs = mpn_sec_div_r_itch(s->num_limbs, s->n);
    s->tp = calloc((size_t)s->tp_limbs, sizeof(mp_limb_t));
    if (!s->one || !s->table[0] || !s->num || !s->tp) {
        secret_clear(s);
        return -1;
    }
    s->r2 = s->one + words;
    s->unit = s->r2 + words;
    s->x[0] = s->unit + words;
    s->x[1] = s->x[0] + words;
    s->table[1] = s->table[0] + (words << IFMA_WINDOW);
    s->unit[0] = 1;
    mp_limb_t *power = calloc((size_t)s->num_limbs, sizeof(mp_limb_t));
    if (!power) {
        secret_clear(s);
        return -1;
    }
    size_t bit = 52 * (size_t)s->f.kd; /* R' = 2^bit, then R'^2 = 2^(2 bit) */
    power[bit / 64] = (mp_limb_t)1 << (bit % 64);
    secret_reduce(s, power, s->num_limbs);
    ifma_from_limbs(&s->f, s->one, s->num, s->n);
    memset(power, 0, sizeof(mp_limb_t) * (size_t)s->num_limbs);
    power[2 * bit / 64] = (mp_limb_t)1 << (2 * bit % 64);
    secret_reduce(s, power, s->num_limbs);
    ifma_from_limbs(&s->f, s->r2, s->num, s->n);
    free(power);
    return 0;
}

/* out[k] = (c_k mod m)^e mod m for K = 1 or 2 ciphertexts c_k (c_k at c + k cn, of cn limbs,
 * cn <= the set-up's input_limbs) and e of ebits bits (e_limbs), in time that depends on the
 * sizes only; two ciphertexts share the exponentiation's products in pairs (ifma_powm2). */
static void secret_powm(SecretModulus *s, int K, mpz_ptr *out, const mp_limb_t *c,
                        mp_size_t cn, const mp_limb_t *e_limbs, size_t ebits)
{
    for (int k = 0; k < K; k++) {
        secret_reduce(s, c + k * cn, cn);
        ifma_from_limbs(&s->f, s->x[k], s->num, s->n);
        ifma_mul(&s->f, s->x[k], s->x[k], s->r2); /* into Montgomery form */
    }
    if (K == 2)
        ifma_powm2(&s->f, s->x[0], s->x[0], s->x[1], s->x[1], e_limbs, ebits, s->one,
                   s->table[0], s->table[1]);
    else
        ifma_powm(&s->f, s->x[0], s->x[0], e_limbs, ebits, s->one, s->table[0]);
    for (int k = 0; k < K; k++) {
        ifma_mul(&s->f, s->x[k], s->x[k], s->unit); /* and out of it */
        ifma_to_limbs(&s->f, s->num, s->n, s->x[k]);
        mpz_import(out[k], (size_t)s->n, -1, sizeof(mp_limb_t), 0, 0, s->num);
    }
}

/* Whether decryption modulo m (a factor's square) runs on the IFMA product: when the
 * ciphertext modulus M does and m is a size where that is faster (ifma_for_powm). */
static int decrypt_on_ifma(const ModulusObject *M, const mpz_t m)
{
    return M->ifma.nz && ifma_for_powm(mpz_sizeinbase(m, 2));
}

/* The exponent's limbs (malloc'd, at least one) and bit length. */
static mp_limb_t *exponent_limbs(const mpz_t e, size_t *bits)
{
    size_t count = mpz_size(e) ? mpz_size(e) : 1;
    mp_limb_t *limbs = calloc(count, sizeof(mp_limb_t));
    if (limbs)
        mpz_export(limbs, NULL, -1, sizeof(mp_limb_t), 0, 0, e);
    *bits = mpz_sizeinbase(e, 2);
    return limbs;
}

static void mpz_from_be(mpz_t z, const unsigned char *p, size_t w)
{
    mpz_import(z, w, 1, 1, 1, 0, p);
}

static void mpz_to_be(unsigned char *out, size_t w, const mpz_t z)
{
    size_t used = (mpz_sizeinbase(z, 2) + 7) / 8;
    memset(out, 0, w);
    if (mpz_sgn(z))
        mpz_export(out + (w - used), NULL, 1, 1, 1, 0, z);
}

static int parse_mpz(PyObject *bytes_obj, mpz_t z, const char *name)
{
    Py_buffer b;
    if (PyObject_GetBuffer(bytes_obj, &b, PyBUF_SIMPLE) < 0)
        return -1;
    mpz_from_be(z, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    if (mpz_sgn(z) <= 0) {
        PyErr_Format(PyExc_ValueError, "%s must be positive", name);
        return -1;
    }
    return 0;
}

const char crt_doc[] =
             "crt(a, b, m1: Modulus, m2: Modulus, m1_inverse: bytes, width) -> bytes: the x below\n"
             "m1 m2 with x = a[i] mod m1 and x = b[i] mod m2, big-endian of `width` bytes each.";

PyObject *py_crt(PyObject *self, PyObject *args)
{
    Py_buffer a, b;
    PyObject *mo1, *mo2, *inv_obj;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*y*OOOn", &a, &b, &mo1, &mo2, &inv_obj, &width))
        return NULL;
    PyObject *result = NULL;
    mpz_t inv, x, y, prod;
    mpz_inits(inv, x, y, prod, NULL);
    ModulusObject *M1 = as_modulus(mo1), *M2 = M1 ? as_modulus(mo2) : NULL;
    if (!M2 || parse_mpz(inv_obj, inv, "m1_inverse") < 0)
        goto done;
    Py_ssize_t count = a.len / (Py_ssize_t)M1->width;
    if (a.len % (Py_ssize_t)M1->width || b.len != count * (Py_ssize_t)M2->width) {
        PyErr_SetString(PyExc_ValueError, "residue buffers do not match their moduli");
        goto done;
    }
    mpz_mul(prod, M1->value, M2->value);
    if (width <= 0 || (size_t)width < (mpz_sizeinbase(prod, 2) + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "width too small for m1 * m2");
        goto done;
    }
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, count * width);
    if (!result)
        goto done;
    out = (unsigned char *)PyBytes_AS_STRING(result);
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && !bad; i++) {
        mpz_from_be(x, (const unsigned char *)a.buf + i * (Py_ssize_t)M1->width, M1->width);
        mpz_from_be(y, (const unsigned char *)b.buf + i * (Py_ssize_t)M2->width, M2->width);
        if (mpz_cmp(x, M1->value) >= 0 || mpz_cmp(y, M2->value) >= 0) {
            bad = 1;
            break;
        }
        mpz_sub(y, y, x);
        mpz_mul(y, y, inv);
        mpz_mod(y, y, M2->value);
        mpz_addmul(x, y, M1->value);
        mpz_to_be(out + i * width, (size_t)width, x);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "residue not below its modulus");
    }
done:
    mpz_clears(inv, x, y, prod, NULL);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}

const char paillier_mask_doc[] =
             "paillier_mask(n2: Modulus, n: bytes, plaintexts, pwidth, factors) -> bytes:\n"
             "(1 + m n) f mod n^2 = f + n (m f mod n) for each big-endian plaintext m (pwidth\n"
             "bytes, below n) and randomiser f (in (0, n^2)).";

PyObject *py_paillier_mask(PyObject *self, PyObject *args)
{
    PyObject *mo, *n_obj;
    Py_buffer plain, factors;
    Py_ssize_t pwidth;
    if (!PyArg_ParseTuple(args, "OOy*ny*", &mo, &n_obj, &plain, &pwidth, &factors))
        return NULL;
    PyObject *result = NULL;
    Residues rf = {0};
    mpz_t n, m, f, x;
    mpz_inits(n, m, f, x, NULL);
    ModulusObject *M = as_modulus(mo);
    if (!M || parse_mpz(n_obj, n, "n") < 0)
        goto done;
    mpz_mul(x, n, n);
    if (mpz_cmp(x, M->value) != 0) {
        PyErr_SetString(PyExc_ValueError, "the modulus is not n^2");
        goto done;
    }
    if (pwidth <= 0 || plain.len % pwidth) {
        PyErr_SetString(PyExc_ValueError, "plaintexts are not whole blocks of pwidth bytes");
        goto done;
    }
    if (load_residues(M, &factors, &rf, 0) < 0)
        goto done;
    Py_ssize_t count = plain.len / pwidth;
    if (rf.count != count) {
        PyErr_SetString(PyExc_ValueError, "need one factor per plaintext");
        goto done;
    }
    unsigned char *out;
    if (!(result = new_output(M, count, &out)))
        goto done;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        mpz_from_be(m, (const unsigned char *)plain.buf + i * pwidth, (size_t)pwidth);
        if (mpz_cmp(m, n) >= 0) {
            bad = 1;
            break;
        }
        mpz_import(f, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0, rf.limbs + i * M->n);
        mpz_mul(x, m, f);
        mpz_mod(x, x, n);
        mpz_addmul(f, x, n); /* f + n (m f mod n) < n^2 + n (n - 1) */
        mpz_mod(f, f, M->value);
        mpz_to_be(out + i * (Py_ssize_t)M->width, M->width, f);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "plaintext outside [0, n)");
    }
done:
    PyMem_Free(rf.limbs);
    mpz_clears(n, m, f, x, NULL);
    PyBuffer_Release(&plain);
    PyBuffer_Release(&factors);
    return result;
}

const char ou_decrypt_doc[] =
             "ou_decrypt(n: Modulus, data, p, p2, exponent, gp_inverse, pwidth) -> bytes: for\n"
             "each ciphertext c in (0, n), m = L(c^exponent mod p^2) gp_inverse mod p with\n"
             "L(x) = (x - 1) / p, big-endian of pwidth bytes. The exponent is secret:\n"
             "mpz_powm_sec when n's Modulus uses the mpn product, the constant-time IFMA\n"
             "exponentiation when it uses IFMA.";

PyObject *py_ou_decrypt(PyObject *self, PyObject *args)
{
    PyObject *mo, *p_obj, *p2_obj, *e_obj, *inv_obj;
    Py_buffer data;
    Py_ssize_t pwidth;
    if (!PyArg_ParseTuple(args, "Oy*OOOOn", &mo, &data, &p_obj, &p2_obj, &e_obj, &inv_obj,
                          &pwidth))
        return NULL;
    PyObject *result = NULL;
    Residues rc = {0};
    mp_limb_t *e_limbs = NULL;
    mpz_t p, p2, e, inv, c, c1;
    mpz_inits(p, p2, e, inv, c, c1, NULL);
    ModulusObject *M = as_modulus(mo);
    if (!M || parse_mpz(p_obj, p, "p") < 0 || parse_mpz(p2_obj, p2, "p2") < 0 ||
        parse_mpz(e_obj, e, "exponent") < 0 || parse_mpz(inv_obj, inv, "gp_inverse") < 0)
        goto done;
    if (mpz_even_p(p2) || pwidth <= 0 || (size_t)pwidth < (mpz_sizeinbase(p, 2) + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "bad decryption constants");
        goto done;
    }
    if (load_residues(M, &data, &rc, 0) < 0)
        goto done;
    SecretModulus sp;
    int ifma = decrypt_on_ifma(M, p2);
    size_t ebits = 0;
    if (ifma && !(e_limbs = exponent_limbs(e, &ebits))) {
        PyErr_NoMemory();
        goto done;
    }
    if (ifma && secret_init(&sp, p2, M->n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, rc.count * pwidth);
    if (!result) {
        if (ifma)
            secret_clear(&sp);
        goto done;
    }
    out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rc.count; i += 2) {
        int K = i + 1 < rc.count ? 2 : 1; /* two ciphertexts at a time */
        mpz_ptr x[2] = {c, c1};
        if (ifma)
            secret_powm(&sp, K, x, rc.limbs + i * M->n, M->n, e_limbs, ebits);
        else
            for (int k = 0; k < K; k++) {
                mpz_import(x[k], (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0,
                           rc.limbs + (i + k) * M->n);
                mpz_mod(x[k], x[k], p2);
                mpz_powm_sec(x[k], x[k], e, p2);
            }
        for (int k = 0; k < K; k++) {
            mpz_sub_ui(x[k], x[k], 1);
            mpz_tdiv_q(x[k], x[k], p);
            mpz_mul(x[k], x[k], inv);
            mpz_mod(x[k], x[k], p);
            mpz_to_be(out + (i + k) * pwidth, (size_t)pwidth, x[k]);
        }
    }
    Py_END_ALLOW_THREADS
    if (ifma)
        secret_clear(&sp);
done:
    PyMem_Free(rc.limbs);
    free(e_limbs);
    mpz_clears(p, p2, e, inv, c, c1, NULL);
    PyBuffer_Release(&data);
    return result;
}

const char paillier_decrypt_doc[] =
             "paillier_decrypt(n2: Modulus, data, p, q, p2, q2, hp, hq, p_inverse, pwidth) ->\n"
             "bytes: CRT decryption of each ciphertext in (0, n^2) to its plaintext in [0, n),\n"
             "big-endian of pwidth bytes; exponents p - 1 and q - 1 with mpz_powm_sec (mpn\n"
             "product) or the constant-time IFMA exponentiation (when n^2's Modulus uses IFMA).";

PyObject *py_paillier_decrypt(PyObject *self, PyObject *args)
{
    PyObject *mo, *objs[7];
    Py_buffer data;
    Py_ssize_t pwidth;
    if (!PyArg_ParseTuple(args, "Oy*OOOOOOOn", &mo, &data, &objs[0], &objs[1], &objs[2],
                          &objs[3], &objs[4], &objs[5], &objs[6], &pwidth))
        return NULL;
    static const char *names[7] = {"p", "q", "p2", "q2", "hp", "hq", "p_inverse"};
    PyObject *result = NULL;
    Residues rc = {0};
    mp_limb_t *ep_limbs = NULL, *eq_limbs = NULL;
    mpz_t k[7], c, mp, mq, mp1, mq1, ep, eq, n;
    for (int i = 0; i < 7; i++)
        mpz_init(k[i]);
    mpz_inits(c, mp, mq, mp1, mq1, ep, eq, n, NULL);
    ModulusObject *M = as_modulus(mo);
    if (!M)
        goto done;
    for (int i = 0; i < 7; i++)
        if (parse_mpz(objs[i], k[i], names[i]) < 0)
            goto done;
    mpz_mul(n, k[0], k[1]);
    if (mpz_even_p(k[2]) || mpz_even_p(k[3]) || pwidth <= 0 ||
        (size_t)pwidth < (mpz_sizeinbase(n, 2) + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "bad decryption constants");
        goto done;
    }
    mpz_sub_ui(ep, k[0], 1);
    mpz_sub_ui(eq, k[1], 1);
    if (load_residues(M, &data, &rc, 0) < 0)
        goto done;
    SecretModulus sp, sq;
    int ifma = decrypt_on_ifma(M, k[2]) && decrypt_on_ifma(M, k[3]);
    size_t ep_bits = 0, eq_bits = 0;
    if (ifma && (!(ep_limbs = exponent_limbs(ep, &ep_bits)) ||
                 !(eq_limbs = exponent_limbs(eq, &eq_bits)))) {
        PyErr_NoMemory();
        goto done;
    }
    if (ifma && secret_init(&sp, k[2], M->n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (ifma && secret_init(&sq, k[3], M->n) < 0) {
        secret_clear(&sp);
        PyErr_NoMemory();
        goto done;
    }
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, rc.count * pwidth);
    if (!result) {
        if (ifma) {
            secret_clear(&sp);
            secret_clear(&sq);
        }
        goto done;
    }
    out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rc.count; i += 2) {
        int K = i + 1 < rc.count ? 2 : 1; /* two ciphertexts at a time */
        mpz_ptr xp[2] = {mp, mp1}, xq[2] = {mq, mq1};
        if (ifma) {
            secret_powm(&sp, K, xp, rc.limbs + i * M->n, M->n, ep_limbs, ep_bits);
            secret_powm(&sq, K, xq, rc.limbs + i * M->n, M->n, eq_limbs, eq_bits);
        }
        else
            for (int j = 0; j < K; j++) {
                mpz_import(c, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0,
                           rc.limbs + (i + j) * M->n);
                mpz_mod(xp[j], c, k[2]);
                mpz_powm_sec(xp[j], xp[j], ep, k[2]);
                mpz_mod(xq[j], c, k[3]);
                mpz_powm_sec(xq[j], xq[j], eq, k[3]);
            }
        for (int j = 0; j < K; j++) {
            mpz_ptr a = xp[j], b = xq[j];
            mpz_sub_ui(a, a, 1);
            mpz_tdiv_q(a, a, k[0]);
            mpz_mul(a, a, k[4]);
            mpz_mod(a, a, k[0]);
            mpz_sub_ui(b, b, 1);
            mpz_tdiv_q(b, b, k[1]);
            mpz_mul(b, b, k[5]);
            mpz_mod(b, b, k[1]);
            mpz_sub(b, b, a);
            mpz_mul(b, b, k[6]);
            mpz_mod(b, b, k[1]);
            mpz_addmul(a, b, k[0]);
            mpz_to_be(out + (i + j) * pwidth, (size_t)pwidth, a);
        }
    }
    Py_END_ALLOW_THREADS
    if (ifma) {
        secret_clear(&sp);
        secret_clear(&sq);
    }
done:
    PyMem_Free(rc.limbs);
    free(ep_limbs);
    free(eq_limbs);
    for (int i = 0; i < 7; i++)
        mpz_clear(k[i]);
    mpz_clears(c, mp, mq, mp1, mq1, ep, eq, n, NULL);
    PyBuffer_Release(&data);
    return result;
}
