"""Certificates: the files ``init``/``request``/``sign`` write, what they contain, and the CLI."""

from __future__ import annotations

import datetime as dt
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from p2pboost import certs
from p2pboost.app.cli import main
from p2pboost.exceptions import ConfigError, InputError
from p2pboost.net.transport import websocket_transport
from p2pboost.transports.base import Connection


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def load_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fed")
    certs.init(out, ["guest", "host1"], days=30)
    return out


def test_init_writes_a_ca_and_one_directory_per_party(fed: Path) -> None:
    assert mode(fed / "ca" / "ca-key.pem") == 0o600
    for party in ("guest", "host1"):
        assert mode(fed / party / "key.pem") == 0o600
        assert (fed / party / "ca.pem").read_bytes() == (fed / "ca" / "ca.pem").read_bytes()
    ca = load_cert(fed / "ca" / "ca.pem")
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca
    assert constraints.path_length == 0


def test_party_certificate_names_the_party_and_is_signed_by_the_ca(fed: Path) -> None:
    ca = load_cert(fed / "ca" / "ca.pem")
    cert = load_cert(fed / "guest" / "cert.pem")
    cert.verify_directly_issued_by(ca)
    assert certs.party_id_from_certificate(cert) == "guest"
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "guest"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usage) == {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH}
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert dt.timedelta(days=30) <= lifetime <= dt.timedelta(days=30, minutes=10)
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)


def test_init_never_overwrites_keys(fed: Path) -> None:
    before = (fed / "ca" / "ca-key.pem").read_bytes()
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        certs.init(fed, ["guest"])
    assert (fed / "ca" / "ca-key.pem").read_bytes() == before


@pytest.mark.parametrize(
    "parties", [[], ["ok", "ok"], ["bad/name"], [""], ["-dash"], ["x" * 65], ["ca"]]
)
def test_init_rejects_bad_party_lists(tmp_path: Path, parties: list[str]) -> None:
    with pytest.raises(InputError):
        certs.init(tmp_path, parties)
    assert not (tmp_path / "ca").exists()


def test_tls_config_checks_files(fed: Path, tmp_path: Path) -> None:
    config = certs.TLSConfig.from_dir(fed / "guest")
    assert config.party_id == "guest"
    assert certs.certificate_problem(config) is None
    with pytest.raises(ConfigError, match="TLS directory not found"):
        certs.TLSConfig.from_dir(tmp_path / "missing")
    with pytest.raises(ConfigError, match="private key file not found"):
        certs.TLSConfig(config.ca_file, config.cert_file, tmp_path / "nokey.pem")
    with pytest.raises(ConfigError, match="cannot load certificate"):
        certs.server_context(certs.TLSConfig(config.ca_file, config.cert_file, config.ca_file))
    with pytest.raises(ConfigError, match="cannot load CA certificate"):
        certs.client_context(certs.TLSConfig(config.key_file, config.cert_file, config.key_file))


def test_contexts_are_tls13_only_and_mutual(fed: Path) -> None:
    config = certs.TLSConfig.from_dir(fed / "guest")
    for context in (certs.server_context(config), certs.client_context(config)):
        assert context.minimum_version is ssl.TLSVersion.TLSv1_3
        assert context.verify_mode is ssl.CERT_REQUIRED
    assert certs.client_context(config).check_hostname is False


def test_certificate_problem_names_the_usual_causes(fed: Path) -> None:
    config = certs.TLSConfig.from_dir(fed / "guest")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=31)
    assert "expired on" in (certs.certificate_problem(config, at=later) or "")
    earlier = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    assert "check the clock" in (certs.certificate_problem(config, at=earlier) or "")
    foreign = certs.TLSConfig(fed / "guest" / "cert.pem", config.cert_file, config.key_file)
    assert "not issued by the CA" in (certs.certificate_problem(foreign) or "")


def test_request_and_sign(fed: Path, tmp_path: Path) -> None:
    laptop = tmp_path / "host2"
    csr = certs.request("host2", laptop)
    assert csr == laptop / "host2.csr"
    assert mode(laptop / "key.pem") == 0o600
    assert certs.sign(csr, fed / "ca", laptop / "cert.pem", party_id="host2") == "host2"
    cert = load_cert(laptop / "cert.pem")
    cert.verify_directly_issued_by(load_cert(fed / "ca" / "ca.pem"))
    assert certs.party_id_from_certificate(cert) == "host2"
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        certs.request("host2", laptop)


def test_sign_checks_the_request(fed: Path, tmp_path: Path) -> None:
    csr = certs.request("host3", tmp_path / "host3")
    with pytest.raises(InputError, match="requests party 'host3', not 'host4'"):
        certs.sign(csr, fed / "ca", tmp_path / "c1.pem", party_id="host4")

    # A CSR whose name and alternative name disagree is refused.
    key = ec.generate_private_key(ec.SECP256R1())
    sneaky = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "host3")]))
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier("p2pboost://party/ca")]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "sneaky.csr"
    path.write_bytes(sneaky.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(InputError, match="alternative names must be exactly"):
        certs.sign(path, fed / "ca", tmp_path / "c2.pem")

    with pytest.raises(InputError, match="at least one day"):
        certs.sign(csr, fed / "ca", tmp_path / "c0.pem", days=0)

    (tmp_path / "junk.csr").write_bytes(b"not a csr")
    with pytest.raises(InputError, match="not a PEM certificate signing request"):
        certs.sign(tmp_path / "junk.csr", fed / "ca", tmp_path / "c3.pem")
    assert not (tmp_path / "c1.pem").exists()


async def test_a_signed_request_is_accepted_by_the_tls_layer(fed: Path, tmp_path: Path) -> None:
    laptop = tmp_path / "host2"
    csr = certs.request("host2", laptop)
    certs.sign(csr, fed / "ca", laptop / "cert.pem")
    (laptop / "ca.pem").write_bytes((fed / "ca" / "ca.pem").read_bytes())
    seen: list[str] = []

    async def handler(connection: Connection) -> None:
        seen.append(connection.peer_id)
        await connection.send(b"welcome")

    server = websocket_transport(certs.TLSConfig.from_dir(fed / "host1"))
    listener = await server.serve("127.0.0.1:0", handler)
    try:
        client = websocket_transport(certs.TLSConfig.from_dir(laptop), party_id="host2")
        connection = await client.connect(listener.address, peer_id="host1")
        assert await connection.receive() == b"welcome"
        await connection.close()
    finally:
        await listener.close()
    assert seen == ["host2"]


# -- the command line ------------------------------------------------------------------------


def test_cli_init_request_sign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fed"
    assert main(["certs", "init", "--out", str(out), "--parties", "guest, host1"]) == 0
    assert mode(out / "host1" / "key.pem") == 0o600
    assert "guest:" in capsys.readouterr().out

    laptop = tmp_path / "laptop"
    assert main(["certs", "request", "--party", "host2", "--out", str(laptop)]) == 0
    csr = laptop / "host2.csr"
    assert csr.exists()
    cert = laptop / "cert.pem"
    args = ["certs", "sign", "--ca", str(out / "ca"), "--csr", str(csr), "--out", str(cert)]
    assert main([*args, "--party", "host2"]) == 0
    assert certs.party_id_from_certificate(load_cert(cert)) == "host2"
    assert "certificate for party 'host2'" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["certs", "sign", "--ca", "{tmp}/nope", "--csr", "x.csr", "--out", "y.pem"],
            "CA directory not found",
        ),
        (["certs", "init", "--out", "{tmp}/f", "--parties", "a,b/c"], "invalid party id 'b/c'"),
        (["certs", "request", "--party", "", "--out", "{tmp}/r"], "invalid party id ''"),
    ],
)
def test_cli_errors_are_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([a.format(tmp=tmp_path) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("p2pboost: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_cli_certs_without_action_shows_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs"]) == 2
    assert "init" in capsys.readouterr().err


def test_cli_requires_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["certs", "init", "--out", "x"])
    assert caught.value.code == 2
    assert "--parties" in capsys.readouterr().err
