/* The key owner's operations: CRT recombination, Paillier's plaintext mask, and decryption
 * with the secret exponent (mpz_powm_sec). */
#include "native.h"

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
             "mpz_powm_sec.";

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
    mpz_t p, p2, e, inv, c;
    mpz_inits(p, p2, e, inv, c, NULL);
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
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, rc.count * pwidth);
    if (!result)
        goto done;
    out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rc.count; i++) {
        mpz_import(c, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0, rc.limbs + i * M->n);
        mpz_mod(c, c, p2);
        mpz_powm_sec(c, c, e, p2);
        mpz_sub_ui(c, c, 1);
        mpz_tdiv_q(c, c, p);
        mpz_mul(c, c, inv);
        mpz_mod(c, c, p);
        mpz_to_be(out + i * pwidth, (size_t)pwidth, c);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(rc.limbs);
    mpz_clears(p, p2, e, inv, c, NULL);
    PyBuffer_Release(&data);
    return result;
}

const char paillier_decrypt_doc[] =
             "paillier_decrypt(n2: Modulus, data, p, q, p2, q2, hp, hq, p_inverse, pwidth) ->\n"
             "bytes: CRT decryption of each ciphertext in (0, n^2) to its plaintext in [0, n),\n"
             "big-endian of pwidth bytes; exponents p - 1 and q - 1 with mpz_powm_sec.";

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
    mpz_t k[7], c, mp, mq, ep, eq, n;
    for (int i = 0; i < 7; i++)
        mpz_init(k[i]);
    mpz_inits(c, mp, mq, ep, eq, n, NULL);
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
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, rc.count * pwidth);
    if (!result)
        goto done;
    out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rc.count; i++) {
        mpz_import(c, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0, rc.limbs + i * M->n);
        mpz_mod(mp, c, k[2]);
        mpz_powm_sec(mp, mp, ep, k[2]);
        mpz_sub_ui(mp, mp, 1);
        mpz_tdiv_q(mp, mp, k[0]);
        mpz_mul(mp, mp, k[4]);
        mpz_mod(mp, mp, k[0]);
        mpz_mod(mq, c, k[3]);
        mpz_powm_sec(mq, mq, eq, k[3]);
        mpz_sub_ui(mq, mq, 1);
        mpz_tdiv_q(mq, mq, k[1]);
        mpz_mul(mq, mq, k[5]);
        mpz_mod(mq, mq, k[1]);
        mpz_sub(mq, mq, mp);
        mpz_mul(mq, mq, k[6]);
        mpz_mod(mq, mq, k[1]);
        mpz_addmul(mp, mq, k[0]);
        mpz_to_be(out + i * pwidth, (size_t)pwidth, mp);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(rc.limbs);
    for (int i = 0; i < 7; i++)
        mpz_clear(k[i]);
    mpz_clears(c, mp, mq, ep, eq, n, NULL);
    PyBuffer_Release(&data);
    return result;
}
