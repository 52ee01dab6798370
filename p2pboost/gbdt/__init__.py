"""The plaintext gradient-boosting core: pure numpy, no I/O, no crypto."""
