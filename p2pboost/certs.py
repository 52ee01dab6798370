"""Certificates for a federation: a private CA, one key and certificate per party, TLS contexts.

Every party of a federation holds a key and a certificate signed by the federation's own CA,
and trusts *only* that CA. The party id lives in the certificate as a URI subject alternative
name ``p2pboost://party/<id>`` (the authoritative place, read by :func:`party_id_from_peercert`)
and, for people reading the certificate, as the subject common name. Parties connect by IP
across laptops, so host names are not checked; the transport checks the party id instead.

Keys are ECDSA P-256: small, fast in TLS 1.3 and supported by every OpenSSL that Python
ships with. Private keys are written unencrypted (PKCS#8 PEM) with mode 0600, created with that
mode (never widened and narrowed afterwards), and existing files are never overwritten.

Two ways to set up a federation:

* one trusted operator runs :func:`init` for every party and hands each party its directory
  (``ca.pem``, ``cert.pem``, ``key.pem``); or
* each party runs :func:`request` on its own laptop (the key never leaves it), sends the CSR to
  the CA holder, who runs :func:`sign` and sends back the certificate and ``ca.pem``.

Layout written by :func:`init`::

    OUT/ca/ca.pem  OUT/ca/ca-key.pem            the CA (keep ca-key.pem offline)
    OUT/<party>/ca.pem  cert.pem  key.pem      what party <party> needs (TLSConfig.from_dir)
"""

from __future__ import annotations

import datetime as dt
import os
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from p2pboost.exceptions import ConfigError, InputError

__all__ = [
    "PARTY_URI_PREFIX",
    "CertificateAuthority",
    "TLSConfig",
    "certificate_problem",
    "client_context",
    "generate_ca",
    "init",
    "issue_certificate",
    "load_ca",
    "party_id_from_certificate",
    "party_id_from_peercert",
    "request",
    "server_context",
    "sign",
    "validate_party_id",
]

#: The URI SAN that names a party: ``p2pboost://party/<id>``.
PARTY_URI_PREFIX = "p2pboost://party/"
#: Party ids: a letter or digit, then letters, digits, ``_ . -``; at most 64 characters.
_PARTY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_CURVE = ec.SECP256R1()
_ALLOWED_CURVES = (ec.SECP256R1, ec.SECP384R1)
# Tolerate clocks a little behind the issuer's: certificates are valid from 5 minutes ago.
_BACKDATE = dt.timedelta(minutes=5)

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
PARTY_CERT = "cert.pem"
PARTY_KEY = "key.pem"


def validate_party_id(party_id: str) -> str:
    """Return ``party_id`` if it is a valid party id, else raise :class:`InputError`."""
    if not isinstance(party_id, str) or not _PARTY_ID.fullmatch(party_id):
        raise InputError(
            f"invalid party id {party_id!r}: use 1-64 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    return party_id


# -- files ------------------------------------------------------------------------------------


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` (never overwrite: a lost CA key cannot be recovered)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise ConfigError(f"{path} already exists; refusing to overwrite it") from None
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_new(path, pem, 0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    _write_new(path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create directory {path}: {exc.strerror}") from None


# -- certificates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA key and certificate in memory."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def generate_ca(name: str = "p2pboost federation CA", *, days: int = 3650) -> CertificateAuthority:
    """A new self-signed CA that may sign party certificates only (path length 0)."""
    key = ec.generate_private_key(_CURVE)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(key, cert)


def issue_certificate(
    ca: CertificateAuthority,
    party_id: str,
    public_key: ec.EllipticCurvePublicKey,
    *,
    days: int = 365,
    not_before: dt.datetime | None = None,
) -> x509.Certificate:
    """Sign a certificate for ``party_id`` (usable for both TLS client and server auth).

    ``not_before`` defaults to a few minutes ago; pass a past date (with a small ``days``) to
    make a certificate that has already expired, e.g. for tests.
    """
    validate_party_id(party_id)
    _check_key(public_key)
    if days < 1:
        raise InputError(f"a certificate must be valid for at least one day, not {days}")
    start = (_now() - _BACKDATE) if not_before is None else not_before
    ca_public = ca.certificate.public_key()
    if not isinstance(ca_public, ec.EllipticCurvePublicKey):
        raise ConfigError("the CA key is not an EC key")
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party_id)]))
        .issuer_name(ca.certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier(PARTY_URI_PREFIX + party_id)]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )


def _check_key(public_key: object) -> None:
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(
        public_key.curve, _ALLOWED_CURVES
    ):
        raise InputError("the key must be an ECDSA key on P-256 or P-384")


def party_id_from_certificate(cert: x509.Certificate) -> str:
    """The party id named by ``cert``'s ``p2pboost://party/<id>`` URI (exactly one)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise InputError("the certificate has no subject alternative name") from None
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    return _one_party(uris)


def party_id_from_peercert(peercert: Mapping[str, Any]) -> str:
    """The party id in a *verified* peer certificate as returned by ``SSLObject.getpeercert()``.

    Raises :class:`InputError` unless the certificate names exactly one valid party.
    """
    san = peercert.get("subjectAltName", ())
    return _one_party([value for kind, value in san if kind == "URI"])


def _one_party(uris: Iterable[str]) -> str:
    ids = [uri[len(PARTY_URI_PREFIX) :] for uri in uris if uri.startswith(PARTY_URI_PREFIX)]
    if len(ids) != 1:
        raise InputError(
            f"the certificate must name exactly one party ({PARTY_URI_PREFIX}<id>), "
            f"it names {len(ids)}"
        )
    return validate_party_id(ids[0])


def load_ca(ca_dir: str | os.PathLike[str]) -> CertificateAuthority:
    """Load the CA written by :func:`init` from ``ca_dir`` (``ca.pem`` and ``ca-key.pem``)."""
    directory = Path(ca_dir)
    if not directory.is_dir():
        raise ConfigError(f"CA directory not found: {directory}")
    cert_pem = _read(directory / CA_CERT, "CA certificate")
    key_pem = _read(directory / CA_KEY, "CA key")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cannot load the CA from {directory}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"the CA key in {directory} is not an EC key")
    if key.public_key() != cert.public_key():
        raise ConfigError(f"the CA key and certificate in {directory} do not match")
    return CertificateAuthority(key, cert)


# -- the three operations of the CLI --------------------------------------------------------


def init(
    out_dir: str | os.PathLike[str],
    parties: Iterable[str],
    *,
    days: int = 365,
    ca_days: int = 3650,
    ca_name: str = "p2pboost federation CA",
) -> dict[str, Path]:
    """Create a CA and a key + certificate for every party; return each party's directory."""
    names = [validate_party_id(p) for p in parties]
    if not names:
        raise InputError("give at least one party")
    if len(set(names)) != len(names):
        raise InputError(f"duplicate party ids in {names}")
    if "ca" in names:
        raise InputError("'ca' is reserved for the CA's directory")
    if not 1 <= days <= ca_days:
        raise InputError(f"days must be between 1 and the CA's validity ({ca_days} days)")
    out = Path(out_dir)
    targets = [out / "ca" / CA_KEY] + [out / p / PARTY_KEY for p in names]
    existing = [str(t) for t in targets if t.exists()]
    if existing:
        raise ConfigError(f"refusing to overwrite existing keys: {', '.join(existing)}")
    ca = generate_ca(ca_name, days=ca_days)
    _mkdir(out / "ca")
    _write_key(out / "ca" / CA_KEY, ca.key)
    _write_cert(out / "ca" / CA_CERT, ca.certificate)
    result = {}
    for party in names:
        directory = out / party
        _mkdir(directory)
        key = ec.generate_private_key(_CURVE)
        _write_key(directory / PARTY_KEY, key)
        _write_cert(
            directory / PARTY_CERT, issue_certificate(ca, party, key.public_key(), days=days)
        )
        _write_cert(directory / CA_CERT, ca.certificate)
        result[party] = directory
    return result


def request(party_id: str, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``key.pem`` (0600) and ``<party>.csr`` to ``out_dir``; return the CSR's path."""
    validate_party_id(party_id)
    out = Path(out_dir)
    _mkdir(out)
    key = ec.generate_private_key(_CURVE)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party_id)]))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier(PARTY_URI_PREFIX + party_id)]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    csr_path = out / f"{party_id}.csr"
    if csr_path.exists():
        raise ConfigError(f"{csr_path} already exists; refusing to overwrite it")
    _write_key(out / PARTY_KEY, key)
    _write_new(csr_path, csr.public_bytes(serialization.Encoding.PEM), 0o644)
    return csr_path


def sign(
    csr_file: str | os.PathLike[str],
    ca_dir: str | os.PathLike[str],
    out_file: str | os.PathLike[str],
    *,
    party_id: str | None = None,
    days: int = 365,
) -> str:
    """Sign a CSR from :func:`request` with the CA in ``ca_dir``; return the party id signed.

    The CSR must be self-consistent (valid signature; common name equal to the one
    ``p2pboost://party/<id>`` URI, if any) and, when ``party_id`` is given, request that id.
    Only the id and the public key are taken from the CSR; every extension is set by the CA.
    """
    ca = load_ca(ca_dir)
    try:
        csr = x509.load_pem_x509_csr(_read(Path(csr_file), "CSR"))
    except ValueError as exc:
        raise InputError(f"{csr_file} is not a PEM certificate signing request: {exc}") from None
    if not csr.is_signature_valid:
        raise InputError(f"{csr_file}: the CSR's signature is invalid")
    names = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1 or not isinstance(names[0].value, str):
        raise InputError(f"{csr_file}: the CSR must have exactly one common name")
    requested = validate_party_id(names[0].value)
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        pass
    else:
        if list(san) != [x509.UniformResourceIdentifier(PARTY_URI_PREFIX + requested)]:
            raise InputError(
                f"{csr_file}: the CSR's alternative names must be exactly "
                f"{PARTY_URI_PREFIX}{requested}"
            )
    if party_id is not None and validate_party_id(party_id) != requested:
        raise InputError(f"{csr_file} requests party {requested!r}, not {party_id!r}")
    public_key = csr.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        raise InputError(f"{csr_file}: the key must be an ECDSA key on P-256 or P-384")
    cert = issue_certificate(ca, requested, public_key, days=days)
    out = Path(out_file)
    _mkdir(out.parent)
    _write_cert(out, cert)
    return requested


# -- TLS --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TLSConfig:
    """Where one party's TLS material lives: the federation's CA, its certificate and key.

    Construction checks that the three files exist and are readable (:class:`ConfigError`
    otherwise), so a typo fails at start-up rather than at the first connection.
    """

    ca_file: Path
    cert_file: Path
    key_file: Path

    def __post_init__(self) -> None:
        for name, what in (
            ("ca_file", "CA certificate"),
            ("cert_file", "certificate"),
            ("key_file", "private key"),
        ):
            path = Path(getattr(self, name))
            object.__setattr__(self, name, path)
            if not path.is_file():
                raise ConfigError(f"{what} file not found: {path}")
            if not os.access(path, os.R_OK):
                raise ConfigError(f"{what} file is not readable: {path}")

    @classmethod
    def from_dir(cls, directory: str | os.PathLike[str]) -> TLSConfig:
        """The files :func:`init` writes for one party: ``ca.pem``, ``cert.pem``, ``key.pem``."""
        base = Path(directory)
        if not base.is_dir():
            raise ConfigError(f"TLS directory not found: {base}")
        return cls(base / CA_CERT, base / PARTY_CERT, base / PARTY_KEY)

    @property
    def party_id(self) -> str:
        """The party id in this party's own certificate."""
        try:
            cert = x509.load_pem_x509_certificate(_read(self.cert_file, "certificate"))
            return party_id_from_certificate(cert)
        except (ValueError, InputError) as exc:
            raise ConfigError(f"{self.cert_file}: {exc}") from None


def certificate_problem(config: TLSConfig, *, at: dt.datetime | None = None) -> str | None:
    """Why peers would refuse this party's own certificate, or ``None`` if we see no reason.

    Checks what a peer checks: the certificate is issued by the CA in ``ca_file``, is valid
    now (or at ``at``) and names exactly one party. Used to explain refusals, whose real reason
    (a TLS alert) asyncio does not pass on to the client.
    """
    try:
        cert = x509.load_pem_x509_certificate(_read(config.cert_file, "certificate"))
        ca = x509.load_pem_x509_certificate(_read(config.ca_file, "CA certificate"))
    except (ValueError, ConfigError) as exc:
        return f"our certificate cannot be read: {exc}"
    now = at or _now()
    if now > cert.not_valid_after_utc:
        return f"our certificate {config.cert_file} expired on {cert.not_valid_after_utc:%Y-%m-%d}"
    if now < cert.not_valid_before_utc:
        return (
            f"our certificate {config.cert_file} is not valid before "
            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (check the clock)"
        )
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return f"our certificate {config.cert_file} is not issued by the CA in {config.ca_file}"
    try:
        party_id_from_certificate(cert)
    except InputError as exc:
        return f"our certificate {config.cert_file}: {exc}"
    return None


def _base_context(purpose: int, config: TLSConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    try:
        context.load_verify_locations(cafile=str(config.ca_file))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load CA certificate {config.ca_file}: {exc}") from None
    try:
        context.load_cert_chain(str(config.cert_file), str(config.key_file))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"cannot load certificate {config.cert_file} with key {config.key_file}: {exc}"
        ) from None
    return context


def server_context(config: TLSConfig) -> ssl.SSLContext:
    """TLS 1.3 server context that requires a client certificate from the federation's CA."""
    return _base_context(ssl.PROTOCOL_TLS_SERVER, config)


def client_context(config: TLSConfig) -> ssl.SSLContext:
    """TLS 1.3 client context that presents our certificate and trusts only the federation CA.

    Host name checking is off on purpose: parties are reached by IP address, and the caller
    must instead check the party id in the server's certificate
    (:func:`party_id_from_peercert`) against the party it meant to reach.
    """
    context = _base_context(ssl.PROTOCOL_TLS_CLIENT, config)
    context.check_hostname = False
    return context
