"""Bonawitz's consistency round: before anything of a round with a dropout is revealed, the
survivors sign the survivor set and each checks that ``t`` of them signed the same one.

A server that claims a live client dropped (to get the others' pair keys with it) cannot also
get its self key or shares of its self seed, in that round or another of the key epoch; a
server that shows clients different survivor sets, or relays forged or too few signatures, is
refused by every client, naming the server. Honest dropouts still complete, with the core's
model on the survivors' rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.crypto.secagg import add_masks, pair_sign, sign_survivors, to_unsigned
from p2pboost.exceptions import RemoteProtocolError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo import server as server_module
from p2pboost.homo._federation import Federation
from p2pboost.homo._messages import (
    Advert,
    Command,
    Masked,
    Recover,
    Recovered,
    Reply,
    Reveal,
    Sealed,
    Signed,
    Survivors,
    Unmask,
)
from p2pboost.homo.client import Client
from p2pboost.homo.config import ClientIdentity, HomoConfig, HomoPhase, HomoResult
from tests.homo.conftest import Crash, Run, crash_at, hello, run_homo, same_trees

PARAMS = BoostParams(n_estimators=2, max_depth=2, max_bin=8)
IDS = ["c1", "c2", "c3", "c4"]
RUN = hello(HomoConfig(allow_two_clients=True))["run"]


def _split(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> dict[str, tuple]:
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    return {f"c{i + 1}": (X[i::n], y[i::n]) for i in range(n)}


def _received(run: Run, tag: str) -> list[tuple[str, dict[str, Any]]]:
    """What the server received of ``tag``, by sender."""
    return [(who, obj) for kind, who, obj in run.received if kind == "recv" and obj["t"] == tag]


# -- a client's rules (sans-I/O, real ECDSA signatures) -----------------------------------------


def _signing_key(federation: Path, c: str) -> Any:
    return ClientIdentity.from_dir(federation / c).signing_key


@pytest.fixture
def clients(federation: Path) -> dict[str, Client]:
    """Four clients with keys of epoch 1 (threshold 3) that all sent rounds 1 and 2."""
    config = HomoConfig(allow_two_clients=True, threshold=3)
    rng = np.random.default_rng(0)
    out = {}
    for c in IDS:
        X, y = rng.normal(size=(20, 3)), (rng.random(20) < 0.5).astype(float)
        ident = ClientIdentity.from_dir(federation / c)
        out[c] = Client(c, "server", X, y, config, identity=ident)
        out[c].handle(hello(config))
    epoch = {"t": "epoch", "epoch": 1, "members": IDS, "threshold": 3}
    adverts = {c: cl.handle(epoch) for c, cl in out.items()}
    relay: dict[str, Any] = {"t": "adverts", "epoch": 1}
    for k in ("public", "signature", "cert"):
        relay[k] = {c: getattr(a, k) for c, a in adverts.items() if isinstance(a, Advert)}
    sealed = {c: cl.handle(relay) for c, cl in out.items()}
    for c, cl in out.items():
        inbox = {s: r.shares[c] for s, r in sealed.items() if s != c and isinstance(r, Sealed)}
        cl.handle({"t": "shares", "epoch": 1, "shares": inbox})
        for r in (1, 2):
            assert isinstance(cl.handle({"t": "stats", "round": r}), Masked)
    return out


SURVIVING = ["c1", "c2", "c3"]
SURVIVORS = {"t": "survivors", "round": 1, "survivors": SURVIVING, "dropped": ["c4"]}


def _refused(client: Client, msg: Mapping[str, Any], match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match) as err:
        client.handle(dict(msg))
    assert err.value.peer == "server"


def test_a_client_declared_dropped_after_sending_refuses(clients: dict[str, Client]) -> None:
    _refused(clients["c4"], SURVIVORS, "declared dropped, though we sent our vector")


def test_a_client_signs_one_survivor_set_per_epoch(clients: dict[str, Client]) -> None:
    """Its keys mask every round of the epoch: keys revealed for two sets, or for two rounds
    (say its self key in one, shares of its mask key in another), could unmask it."""
    c1 = clients["c1"]
    _refused(c1, {**SURVIVORS, "survivors": ["c1", "c2"], "dropped": ["c3", "c4"]}, "fewer")
    assert isinstance(c1.handle(SURVIVORS), Signed)
    other = {**SURVIVORS, "survivors": ["c1", "c2", "c4"], "dropped": ["c3"]}
    _refused(c1, other, "a second survivor set in epoch 1")
    _refused(c1, SURVIVORS, "a second survivor set")
    _refused(c1, {**other, "round": 2}, "we sign one per epoch")
    _refused(c1, {**other, "t": "unmask", "round": 2, "signatures": {}}, "did not sign")


def test_forged_missing_or_foreign_signatures_are_refused(
    clients: dict[str, Client], federation: Path
) -> None:
    signed = {c: clients[c].handle(SURVIVORS) for c in ("c1", "c2", "c3")}
    sigs = {c: s.signature for c, s in signed.items() if isinstance(s, Signed)}
    assert len(sigs) == 3
    unmask = {**SURVIVORS, "t": "unmask"}
    survivors = SURVIVING
    c1 = clients["c1"]
    key2, key4 = _signing_key(federation, "c2"), _signing_key(federation, "c4")
    flipped = sigs["c2"][:-1] + bytes([sigs["c2"][-1] ^ 1])
    for signatures, match in [
        ({c: sigs[c] for c in ("c1", "c2")}, r"too few .* \(2, threshold 3\)"),  # missing
        ({}, r"too few .* \(0, threshold 3\)"),
        ({**sigs, "c2": flipped}, "the signature of c2"),  # forged
        ({**sigs, "c2": sigs["c3"]}, "the signature of c2"),  # c3's, passed off as c2's
        ({**sigs, "c2": sign_survivors(key2, RUN, 1, 2, survivors)}, "signature of c2"),  # round 2
        ({**sigs, "c2": sign_survivors(key2, RUN, 2, 1, survivors)}, "signature of c2"),  # epoch 2
        ({**sigs, "c2": sign_survivors(key2, "another-run", 1, 1, survivors)}, "of c2"),
        ({**sigs, "c4": sign_survivors(key4, RUN, 1, 1, survivors)}, r"outside .*\['c4'\]"),
    ]:
        _refused(c1, {**unmask, "signatures": signatures}, match)
    # A set other than the one it signed, however well signed, is refused too.
    other = {**unmask, "survivors": ["c1", "c2", "c4"], "dropped": ["c3"], "signatures": sigs}
    _refused(c1, other, "other survivors than those we signed")
    # With t signatures of exactly its set it reveals its keys of the round.
    reveal = c1.handle({**unmask, "signatures": sigs})
    assert isinstance(reveal, Reveal)
    assert sorted(reveal.pair_keys) == ["c4"]


# -- a server that lies (a Federation subclass in place of the honest one) ----------------------


class _Lies:
    """How the lying server handles round ``at``: it hides ``hide``'s vector (as if it were
    lost), tells each client in ``told`` that set as the survivors, relays signatures by
    ``relay`` (``own``: those on the client's own set; ``all``; ``forged``: one of them
    altered; ``missing``: all but one), then asks the clients that revealed for Shamir shares
    of ``hide``'s self seed (``recover="self"``) or of its mask key (``"key"``). ``first``: a
    survivor set it shows every client for round 1 (signed and unmasked) before that."""

    def __init__(
        self,
        hide: str,
        told: dict[str, list[str]],
        relay: str = "own",
        recover: str | None = None,
        at: int = 1,
        first: list[str] | None = None,
    ) -> None:
        self.hide, self.told, self.relay, self.recover = hide, told, relay, recover
        self.at, self.first = at, first

    def relayed(self, told: Mapping[str, list[str]], c: str, sigs: dict[str, bytes]) -> Any:
        own = {s: sig for s, sig in sorted(sigs.items()) if told[s] == told[c]}
        if self.relay == "all":
            return sigs
        if self.relay == "forged":
            first = next(iter(own))
            return {**own, first: own[first][:-1] + bytes([own[first][-1] ^ 1])}
        if self.relay == "missing":
            return dict(list(own.items())[1:])
        return own

    def recovery(self, r: int, c: str, survivors: list[str], dropped: list[str]) -> Recover:
        if self.recover == "self":  # the seed of its self mask
            return Recover(r, [self.hide], dropped)
        other = next(u for u in survivors if u != c)  # its mask key, as a "dropped" client's
        return Recover(r, [other], dropped)


def _lying_federation(lies: _Lies) -> type[Federation]:
    class LyingFederation(Federation):
        async def ask_all(
            self, clients: Sequence[str], msgs: Mapping[str, Command], expect: type[Any]
        ) -> dict[str, Any]:
            replies = await super().ask_all(clients, msgs, expect)
            if expect is Masked and self.round == lies.at:
                replies.pop(lies.hide)  # received (and tapped), then claimed lost
            return replies

        async def show(self, r: int, told: Mapping[str, list[str]]) -> dict[str, Reveal]:
            """Sign and unmask round ``r``, with the survivor set ``told[client]``."""
            members = list(self.members or [])

            def split(c: str) -> tuple[list[str], list[str]]:
                return told[c], sorted(set(members) - set(told[c]))

            asked = [c for c in members if c in told and c in self.active]
            signed = await self.ask_all(asked, {c: Survivors(r, *split(c)) for c in asked}, Signed)
            sigs = {c: s.signature for c, s in signed.items()}
            unmask = {c: Unmask(r, *split(c), lies.relayed(told, c, sigs)) for c in signed}
            return await self.ask_all(sorted(signed), unmask, Reveal)

        async def _unmask(
            self, r: int, total: Any, members: list[str], survivors: list[str]
        ) -> Any:
            if lies.first is not None:
                await self.show(1, dict.fromkeys(members, lies.first))
            reveals = await self.show(r, lies.told)
            if lies.recover is not None and reveals:
                asks = {
                    c: lies.recovery(r, c, lies.told[c], sorted(set(members) - set(lies.told[c])))
                    for c in reveals
                }
                await self.ask_all(sorted(reveals), asks, Recovered)
            raise AssertionError("the lying server got through")

    return LyingFederation


async def _lie(
    lies: _Lies,
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    monkeypatch: pytest.MonkeyPatch,
    n: int = 4,
) -> Run:
    monkeypatch.setattr(server_module, "Federation", _lying_federation(lies))
    # threshold: a majority, 3 of 4 or 5
    config = HomoConfig(allow_two_clients=True, params=PARAMS, round_timeout=5)
    return await run_homo(_split(breast, n), config, federation)


def _named_the_server(run: Run, clients: Sequence[str], match: str) -> None:
    for c in clients:
        err = run.models[c]
        assert isinstance(err, RemoteProtocolError), (c, err)
        assert err.peer == "server", (c, err)
        assert match in str(err), (c, err)


async def test_a_server_claiming_a_live_client_dropped_cannot_unmask_it(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """c3 sent its vector; the server claims it dropped to c1, c2, c4 (they vouch for that
    set and reveal their pair keys with c3, as for any dropout) and, to remove c3's self mask
    too, tells c3 that c4 dropped and asks the others for shares of c3's self seed."""
    others = ["c1", "c2", "c4"]
    told = dict.fromkeys(others, others) | {"c3": ["c1", "c2", "c3"]}
    run = await _lie(_Lies("c3", told, recover="self"), breast, federation, monkeypatch)
    _named_the_server(run, ["c3"], "too few survivors signed the survivor set (1, threshold 3)")
    _named_the_server(run, others, "recovery asks for shares we must not give")
    assert not isinstance(run.result, HomoResult)
    # The server got no key of c3's own: no self key from it, no share from anyone.
    reveals = _received(run, "reveal")
    assert sorted(who for who, _ in reveals) == others
    assert not _received(run, "recovered")
    # What it holds leaves c3's vector masked: its y minus every key revealed is not c3's.
    (y,) = [obj["y"] for who, obj in _received(run, "masked") if who == "c3" and obj["round"] == 1]
    pair = {who: obj["pair_keys"]["c3"] for who, obj in reveals if "c3" in obj["pair_keys"]}
    own = [obj for who, obj in reveals if who == "c3"]  # none: it refused
    pair |= {peer: k for obj in own for peer, k in obj["pair_keys"].items()}
    keys = [(k, -pair_sign("c3", peer)) for peer, k in pair.items()]
    keys += [(obj["self_key"], -1) for obj in own]
    best = add_masks(y, keys, 1)
    plain = to_unsigned(run.plain["c3"][1][1])
    assert sorted(pair) == others  # their pair keys with c3: what any dropout reveals
    assert not np.any(best == plain)  # c3's self mask, never revealed, still hides it


async def test_a_server_cannot_combine_two_rounds_of_an_epoch(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five clients, threshold 3. The server unmasks round 1 with c3 among the survivors (c3
    reveals its round-1 self key), then claims c3 dropped out of round 2 and asks for shares
    of its mask key, which masks round 1 as well: round 1's vector of c3 in the clear. The
    clients sign one survivor set per epoch, so round 2 is refused."""
    others = ["c1", "c2", "c4"]
    lies = _Lies(
        "c3", dict.fromkeys(others, others), recover="key", at=2, first=["c1", "c2", "c3", "c4"]
    )
    run = await _lie(lies, breast, federation, monkeypatch, n=5)
    _named_the_server(run, ["c5"], "declared dropped, though we sent our vector")
    _named_the_server(run, others, "a second survivor set in epoch 1 (round 2")
    assert sorted(who for who, _ in _received(run, "reveal")) == ["c1", "c2", "c3", "c4"]
    assert {obj["round"] for _, obj in _received(run, "reveal")} == {1}
    assert not _received(run, "recovered")


@pytest.mark.parametrize("relay", ["own", "all"])
async def test_different_survivor_sets_for_different_clients_reveal_nothing(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    monkeypatch: pytest.MonkeyPatch,
    relay: str,
) -> None:
    """c1, c2 are told c4 dropped; c3, c4 that c1 did: each set has 2 signatures, fewer than
    the threshold 3 (the signatures on the other set, if relayed, are not on this one)."""
    sets = {"c1": ["c1", "c2", "c3"], "c3": ["c2", "c3", "c4"]}
    told = {c: sets["c1" if c in ("c1", "c2") else "c3"] for c in IDS}
    run = await _lie(_Lies("c4", told, relay), breast, federation, monkeypatch)
    match = "too few survivors signed" if relay == "own" else "outside the survivor set"
    _named_the_server(run, IDS, match)
    assert len(_received(run, "signed")) == 4
    assert not _received(run, "reveal")


@pytest.mark.parametrize("relay", ["forged", "missing"])
async def test_forged_or_too_few_relayed_signatures_reveal_nothing(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    monkeypatch: pytest.MonkeyPatch,
    relay: str,
) -> None:
    survivors = ["c1", "c2", "c3"]
    run = await _lie(
        _Lies("c4", dict.fromkeys(IDS, survivors), relay), breast, federation, monkeypatch
    )
    _named_the_server(run, ["c4"], "declared dropped, though we sent our vector")
    _named_the_server(
        run, survivors, "signature of c1" if relay == "forged" else "(2, threshold 3)"
    )
    assert not _received(run, "reveal")


# -- honest runs ---------------------------------------------------------------------------------


async def test_a_round_everyone_sent_in_asks_for_no_signature_key_or_share(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    config = HomoConfig(
        allow_two_clients=True, params=PARAMS.with_updates(n_estimators=1), round_timeout=20
    )
    run = await run_homo(_split(breast, 3), config, federation)
    assert isinstance(run.result, HomoResult), run.result
    tags = {obj["t"] for kind, _, obj in run.received if kind == "recv"}
    assert tags == {"joined", "advert", "sealed", "ready", "masked"}


async def test_honest_dropouts_pass_the_check_and_give_the_cores_model(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """c5 never sends its first binning vector; c4 sends it, then dies before signing: c1, c2,
    c3 (the threshold, 3) sign, reveal, and rebuild c4's self mask and c5's mask key from
    their shares; binning restarts among them and the model is the core's on their rows."""
    parts = _split(breast, 5)
    hooks = {
        "c5": crash_at("masked", 2, HomoPhase.STATS),
        "c4": crash_at("signed", 1, HomoPhase.STATS),
    }
    config = HomoConfig(allow_two_clients=True, params=PARAMS, threshold=3, round_timeout=5)
    run = await run_homo(parts, config, federation, hooks=hooks)
    assert isinstance(run.result, HomoResult), run.result
    assert run.result.clients == ["c1", "c2", "c3"]
    assert all(isinstance(run.models[c], Crash) for c in ("c4", "c5"))
    assert sorted(who for who, _ in _received(run, "signed")) == ["c1", "c2", "c3"]
    assert len(_received(run, "recovered")) == 3
    recovered = [obj for kind, _, obj in run.received if kind == "aggregate" and obj["round"] == 2]
    assert [a["contributors"] for a in recovered] == [["c1", "c2", "c3", "c4"]]
    want = sum(run.plain[c][2][1] for c in ("c1", "c2", "c3", "c4"))
    np.testing.assert_array_equal(recovered[0]["total"], want)
    X = np.vstack([parts[c][0] for c in ("c1", "c2", "c3")])
    y = np.concatenate([parts[c][1] for c in ("c1", "c2", "c3")])
    core = train(PARAMS, X, y)
    assert same_trees(run.result.booster, core)
    for c in ("c1", "c2", "c3"):
        model = run.models[c]
        assert isinstance(model, Booster)
        assert same_trees(model, core)


async def test_a_client_whose_survivor_signature_fails_is_named_by_the_server(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    def bad_signature(reply: Reply, phase: HomoPhase) -> Reply:
        if isinstance(reply, Signed):
            return Signed(reply.signature[:-1] + bytes([reply.signature[-1] ^ 1]))
        return reply

    hooks: dict[str, Callable[[Reply, HomoPhase], Reply]] = {
        "c3": crash_at("masked", 2, HomoPhase.STATS),
        "c2": bad_signature,
    }
    config = HomoConfig(allow_two_clients=True, params=PARAMS, round_timeout=5)
    run = await run_homo(_split(breast, 3), config, federation, hooks=hooks)
    assert isinstance(run.result, RemoteProtocolError), run.result
    assert run.result.peer == "c2"
    assert "survivor set signature" in str(run.result)
    assert not _received(run, "reveal")
