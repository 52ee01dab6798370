"""Cryptographic building blocks ("hazmat"): Paillier, packing, cipher histograms, PSI, secagg."""
