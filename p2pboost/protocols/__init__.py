"""Federated protocols: one module per protocol, one coroutine per role."""
