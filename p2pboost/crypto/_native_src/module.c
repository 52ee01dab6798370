/*
 * p2pboost.crypto._native: the ciphertext hot loops in C over GMP (this file: the module).
 *
 * Why: a 2048-bit modular product costs about 2 us in GMP and about 0.3 us more when each one
 * is a call from the interpreter (gmpy2), so a third of the encryption and histogram work of a
 * party was spent in CPython. Here every loop runs in C over contiguous fixed-width buffers
 * (ciphertexts as the wire carries them: big-endian blocks of the modulus' width), with the
 * GIL released, so a party can also run the kernels on threads of its own process.
 *
 * Arithmetic: Montgomery multiplication, by one of two products chosen per Modulus when it is
 * made: GMP's mpn layer (mpn_mul_n / mpn_sqr, a REDC with mpn_addmul_1 as in GMP's own redc_1,
 * and a constant-time final subtraction with mpn_cnd_swap), which avoids the division of
 * mpz_mul + mpz_tdiv_r; or, on CPUs with AVX-512 IFMA, an almost-Montgomery product over 52-bit
 * digits (ifma.c), about 3x faster at 2048 bits. The key owner's exponentiations with a secret
 * exponent (decryption) use mpz_powm_sec on the mpn path and a constant-time fixed-window
 * exponentiation on the IFMA product.
 *
 * Trust boundary: the Python module p2pboost.crypto.kernels checks every length, width, count
 * and range before it calls in here. The checks are repeated here (cheaply) so that a wrong
 * call raises ValueError instead of reading out of bounds: buffers must be whole blocks of the
 * stated width, every ciphertext must be in (0, modulus), every index in range.
 *
 * Files: native.h (limbs, Montgomery arithmetic, shared types), modulus.c (the Modulus type,
 * checked buffers), ifma.h / ifma.c (the IFMA product, its digit layout and its constant-time
 * exponentiation), products.c (the kernels over ciphertexts), fixed_base.c (fixed-base
 * tables and encryption), owner.c (CRT, decryption).
 */
#include "native.h"

static PyMethodDef native_methods[] = {
    {"mul", py_mul, METH_VARARGS, mul_doc},
    {"segment_products", py_segment_products, METH_VARARGS, segment_products_doc},
    {"prefix_products", py_prefix_products, METH_VARARGS, prefix_products_doc},
    {"divide", py_divide, METH_VARARGS, divide_doc},
    {"horner", py_horner, METH_VARARGS, horner_doc},
    {"fixed_base", py_fixed_base, METH_VARARGS, fixed_base_doc},
    {"crt", py_crt, METH_VARARGS, crt_doc},
    {"paillier_mask", py_paillier_mask, METH_VARARGS, paillier_mask_doc},
    {"ou_decrypt", py_ou_decrypt, METH_VARARGS, ou_decrypt_doc},
    {"paillier_decrypt", py_paillier_decrypt, METH_VARARGS, paillier_decrypt_doc},
    {"product_kind", py_product_kind, METH_NOARGS, product_kind_doc},
    {"ifma_supported", py_ifma_supported, METH_NOARGS, ifma_supported_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "p2pboost.crypto._native",
    "The ciphertext hot loops in C over GMP (see p2pboost.crypto.kernels).",
    -1,
    native_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (PyType_Ready(&ModulusType) < 0 || PyType_Ready(&FixedBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (!m)
        return NULL;
    Py_INCREF(&ModulusType);
    Py_INCREF(&FixedBaseType);
    if (PyModule_AddObject(m, "Modulus", (PyObject *)&ModulusType) < 0 ||
        PyModule_AddObject(m, "FixedBase", (PyObject *)&FixedBaseType) < 0 ||
        PyModule_AddStringConstant(m, "gmp_version", gmp_version) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
