"""The party config file: strict keys with suggestions, types, paths, the key-size opt-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from p2pboost.app.cli import main
from p2pboost.app.config import PartyConfig, Role, Task, load_config
from p2pboost.exceptions import ConfigError
from tests.cli.conftest import write_config

GUEST: dict[str, Any] = {"id": "guest", "role": "guest", "certs": "certs/guest"}
PEERS = {"host": "wss://127.0.0.1:8444"}
DATA = {"path": "guest.csv", "label_column": "y"}


def _guest(tmp_path: Path, top: dict[str, Any] | None = None, **tables: Any) -> Path:
    tables.setdefault("peers", PEERS)
    tables.setdefault("data", DATA)
    return write_config(tmp_path / "guest.toml", {**GUEST, **(top or {})}, **tables)


def test_a_full_file_resolves_paths_against_its_directory(tmp_path: Path) -> None:
    path = _guest(
        tmp_path,
        {"task": "predict", "workdir": "out", "listen": "0.0.0.0:9000"},
        train={"n_estimators": 7, "max_depth": 4, "learning_rate": 0.1, "psi": False},
        predict={"path": "new.csv", "output": "scores.csv", "align": "psi"},
        serve={"listen": "127.0.0.1:9100", "max_batch": 64, "max_wait_ms": 2},
        node={"reconnect_timeout": 3, "connect_timeout": 1.5},
    )
    config = load_config(path)
    assert isinstance(config, PartyConfig)
    assert (config.id, config.role, config.task) == ("guest", Role.GUEST, Task.PREDICT)
    assert config.certs == tmp_path / "certs" / "guest"
    assert config.data is not None
    assert config.data.path == tmp_path / "guest.csv"
    assert config.predict.path == tmp_path / "new.csv"
    assert config.output_path == tmp_path / "out" / "scores.csv"
    assert config.model_path == tmp_path / "out" / "model.json"
    params = config.train.params
    assert (params.n_estimators, params.max_depth, params.learning_rate) == (7, 4, 0.1)
    assert config.train.psi is False
    assert config.serve.max_wait_ms == 2.0
    node = config.node.node_config()
    assert (node.reconnect_timeout, node.connect_timeout) == (3.0, 1.5)
    assert config.with_task("psi").task is Task.PSI


def test_defaults(tmp_path: Path) -> None:
    config = load_config(_guest(tmp_path))
    assert config.task is Task.TRAIN
    assert config.workdir == tmp_path
    assert config.train.key_bits == 2048
    assert config.train.psi is True
    assert config.predict.align == "ids"
    assert config.peers == PEERS


@pytest.mark.parametrize(
    ("top", "tables", "shown", "suggestion"),
    [
        ({"listne": "127.0.0.1:1"}, {}, "listne", "listen"),
        ({}, {"train": {"n_estimator": 5}}, "train.n_estimator", "n_estimators"),
        ({}, {"data": {**DATA, "id_colum": "x"}}, "data.id_colum", "id_column"),
        ({}, {"node": {"reconect_timeout": 1}}, "node.reconect_timeout", "reconnect_timeout"),
        ({}, {"serve": {"max_batches": 1}}, "serve.max_batches", "max_batch"),
        ({}, {"predict": {"allign": "ids"}}, "predict.allign", "align"),
    ],
)
def test_unknown_key_names_file_key_and_closest_valid_key(
    tmp_path: Path, top: dict[str, Any], tables: dict[str, Any], shown: str, suggestion: str
) -> None:
    path = _guest(tmp_path, top, **tables)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message
    assert f"unknown key {shown!r}" in message
    assert f"did you mean {suggestion!r}?" in message


def test_unknown_key_without_a_close_match_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="valid keys: path, output, align"):
        load_config(_guest(tmp_path, predict={"zzz": 1}))


@pytest.mark.parametrize(
    ("top", "tables", "message"),
    [
        ({}, {"train": {"n_estimators": "ten"}}, "train.n_estimators: expected an integer"),
        ({}, {"train": {"psi": 1}}, "train.psi: expected true or false"),
        ({}, {"train": {"max_depth": 0}}, "max_depth"),
        ({"role": "banker"}, {}, "role = 'banker': choose one of guest, host, server, client"),
        ({"task": "fly"}, {}, "task = 'fly': choose one of psi, train, predict, serve"),
        ({"listen": "localhost"}, {}, "listen: 'localhost' is not an address"),
        ({}, {"peers": {"host": "http://x:1"}}, "peers.host: 'http://x:1' is not an address"),
        ({}, {"predict": {"align": "rows"}}, "predict.align: 'rows': choose one of ids, psi"),
        ({}, {"node": {"connect_timeout": 0}}, "connect_timeout must be > 0"),
        ({}, {"data": {"path": "g.csv"}}, "a guest needs data.label_column"),
        ({}, {"peers": {}}, "[peers] must name at least one other party"),
        ({}, {"peers": {"host": ""}}, "peers.host needs an address: 'guest' dials 'host'"),
        ({}, {"peers": {"bank": "b:1"}}, "listen = \"host:port\" is required: 'bank' dials"),
    ],
)
def test_bad_values(
    tmp_path: Path, top: dict[str, Any], tables: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_guest(tmp_path, top, **tables))
    assert message in str(caught.value)


def test_small_keys_need_the_explicit_opt_in(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="insecure_key_bits = true"):
        load_config(_guest(tmp_path, train={"key_bits": 1024}))
    config = load_config(_guest(tmp_path, train={"key_bits": 1024, "insecure_key_bits": True}))
    assert (config.train.key_bits, config.train.insecure_key_bits) == (1024, True)


def test_scheme_is_paillier_unless_asked(tmp_path: Path) -> None:
    assert load_config(_guest(tmp_path)).train.scheme == "paillier"
    config = load_config(_guest(tmp_path, train={"scheme": "ou"}))
    assert config.train.scheme == "ou"
    with pytest.raises(ConfigError, match=r"train\.scheme: unknown encryption scheme 'rsa'"):
        load_config(_guest(tmp_path, train={"scheme": "rsa"}))


def test_roles_constrain_peers_and_data(tmp_path: Path) -> None:
    host = {"id": "host", "role": "host", "certs": "c", "listen": "127.0.0.1:1"}
    data = {"path": "h.csv"}
    with pytest.raises(ConfigError, match="exactly one party"):
        load_config(write_config(tmp_path / "h.toml", host, peers={"a": "", "b": ""}, data=data))
    with pytest.raises(ConfigError, match="a host holds no labels"):
        load_config(
            write_config(
                tmp_path / "h.toml", host, peers={"guest": ""}, data={**data, "label_column": "y"}
            )
        )
    server = {"id": "server", "role": "server", "certs": "c", "listen": "127.0.0.1:1"}
    with pytest.raises(ConfigError, match="holds no data"):
        load_config(write_config(tmp_path / "s.toml", server, peers={"c1": ""}, data=data))


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("id = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(tmp_path / "bad.toml")


def test_cli_wrong_key_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _guest(tmp_path, train={"n_estimator": 5})
    assert main(["party", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"p2pboost: error: {path}: unknown key 'train.n_estimator'; did you mean 'n_estimators'?\n"
    )


def test_cli_errors_as_json_records_with_json_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _guest(tmp_path, train={"n_estimator": 5})
    assert main(["--log-format", "json", "party", "--config", str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"]) == ("error", "p2pboost")
    assert "unknown key 'train.n_estimator'; did you mean 'n_estimators'?" in record["message"]


def test_init_model_is_this_partys_file_for_vertical_training(tmp_path: Path) -> None:
    config = load_config(_guest(tmp_path, train={"init_model": "old.json"}))
    assert config.init_model_path == config.workdir / "old.json"
    assert load_config(_guest(tmp_path)).init_model_path is None
    server = write_config(
        tmp_path / "server.toml",
        {"id": "server", "role": "server", "certs": "certs", "listen": "127.0.0.1:9000"},
        peers={"c1": ""},
        train={"init_model": "old.json"},
    )
    assert load_config(server).init_model_path is not None  # the homo server continues it
    client = write_config(
        tmp_path / "client.toml",
        {"id": "c1", "role": "client", "certs": "certs"},
        peers={"server": "wss://127.0.0.1:9000"},
        data={"path": "c1.csv", "label_column": "y"},
        train={"init_model": "old.json"},
    )
    with pytest.raises(ConfigError, match=r"a homo client needs no train\.init_model"):
        load_config(client)


def test_purity_bound_is_a_purity_below_one(tmp_path: Path) -> None:
    config = load_config(_guest(tmp_path, train={"purity_bound": 0.2}))
    assert config.train.purity_bound == 0.2
    assert load_config(_guest(tmp_path)).train.purity_bound == 0.0
    for bad in (1.0, -0.5):
        with pytest.raises(ConfigError, match="purity_bound"):
            load_config(_guest(tmp_path, train={"purity_bound": bad}))


def test_label_dp_epsilon_is_a_finite_epsilon_owned_by_the_guest(tmp_path: Path) -> None:
    config = load_config(_guest(tmp_path, train={"label_dp_epsilon": 4.0}))
    assert config.train.label_dp_epsilon == 4.0
    assert load_config(_guest(tmp_path)).train.label_dp_epsilon == 0.0
    for bad in (-1.0, float("inf")):
        with pytest.raises(ConfigError, match="label_dp_epsilon") as err:
            load_config(_guest(tmp_path, train={"label_dp_epsilon": bad}))
        assert repr(bad) in str(err.value)
    dp = {"train.dp": {"epsilon": 1.0}}
    with pytest.raises(ConfigError, match=r"label_dp_epsilon: a dp model"):
        load_config(_guest(tmp_path, train={"label_dp_epsilon": 1.0}, **dp))
    host = {"id": "host", "role": "host", "certs": "c", "listen": "127.0.0.1:1"}
    path = write_config(
        tmp_path / "h.toml",
        host,
        peers={"guest": ""},
        data={"path": "h"},
        train={"label_dp_epsilon": 1.0},
    )
    with pytest.raises(ConfigError, match="label_dp_epsilon: the guest owns this setting"):
        load_config(path)


def test_complete_secure_is_a_count_of_rounds(tmp_path: Path) -> None:
    assert load_config(_guest(tmp_path, train={"complete_secure": 1})).train.complete_secure == 1
    assert load_config(_guest(tmp_path)).train.complete_secure == 0
    with pytest.raises(ConfigError, match="complete_secure"):
        load_config(_guest(tmp_path, train={"complete_secure": -1}))


def test_train_table_reads_the_vertical_modes(tmp_path: Path) -> None:
    from p2pboost.app._toml import Reader as _Reader
    from p2pboost.app.config import _train

    def read(table: dict[str, object]) -> object:
        return _train(_Reader(tmp_path / "g.toml", table, "train."))

    mix = read({"tree_num_per_party": 2})
    assert mix.tree_num_per_party == 2  # type: ignore[attr-defined]
    layered = read({"max_depth": 5, "host_depth": 2, "guest_depth": 3})
    assert (layered.host_depth, layered.guest_depth) == (2, 3)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="max_depth must be 5, not 6"):
        read({"host_depth": 2, "guest_depth": 3})
    with pytest.raises(ConfigError, match="not both"):
        read({"max_depth": 5, "host_depth": 2, "guest_depth": 3, "tree_num_per_party": 1})


def test_a_guest_table_may_hold_labels_only(tmp_path: Path) -> None:
    from p2pboost.app._tables import load_table
    from p2pboost.app.config import DataConfig

    (tmp_path / "g.csv").write_text("id,y\na,1\nb,0\nc,1\n")
    table = load_table(DataConfig(tmp_path / "g.csv", "id", "y"), require_label=True)
    assert table.X.shape == (3, 0)
    assert table.y is not None
    assert table.y.tolist() == [1.0, 0.0, 1.0]
    (tmp_path / "h.csv").write_text("id\na\nb\n")
    with pytest.raises(ConfigError, match="no feature columns"):
        load_table(DataConfig(tmp_path / "h.csv", "id", "y"), require_label=False)


def test_train_table_reads_the_host_memory_budget(tmp_path: Path) -> None:
    from p2pboost.app._toml import Reader as _Reader
    from p2pboost.app.config import _train

    def read(table: dict[str, object]) -> object:
        return _train(_Reader(tmp_path / "h.toml", table, "train."))

    assert read({}).memory_budget_mb is None  # type: ignore[attr-defined]
    assert read({"memory_budget_mb": 512}).memory_budget_mb == 512.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="memory_budget_mb"):
        read({"memory_budget_mb": -1})


def test_compute_names_a_tls_scheduler_and_the_clusters_certificate(tmp_path: Path) -> None:
    assert load_config(_guest(tmp_path)).compute.scheduler is None  # the local pool
    config = load_config(
        _guest(
            tmp_path,
            compute={
                "scheduler": "tls://10.0.0.5:8786",
                "tls": "cluster/party",
                "key_workers": ["tls://10.0.0.7:40001"],
            },
        )
    )
    assert config.compute.scheduler == "tls://10.0.0.5:8786"
    assert config.compute.tls == tmp_path / "cluster" / "party"
    assert config.compute.key_workers == ("tls://10.0.0.7:40001",)


@pytest.mark.parametrize(
    ("compute", "problem"),
    [
        ({"scheduler": "tcp://10.0.0.5:8786", "tls": "c"}, "must be a tls:// address"),
        ({"scheduler": "tls://10.0.0.5:8786"}, "compute.tls: missing"),
        ({"tls": "c"}, "compute.scheduler: missing"),
        ({"scheduler": "tls://h:1", "tls": "c", "key_workers": "w"}, "a list of worker"),
        ({"scheduler": "tls://h:1", "tls": "c", "connect_timeout": 0}, "must be > 0"),
        ({"schedular": "tls://h:1"}, "did you mean 'scheduler'"),
    ],
)
def test_a_bad_compute_table_names_the_key(
    tmp_path: Path, compute: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_config(_guest(tmp_path, compute=compute))


def test_compute_is_for_the_vertical_roles(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "server.toml",
        {"id": "server", "role": "server", "certs": "certs/server"},
        peers={"c1": ""},
        compute={"scheduler": "tls://10.0.0.5:8786", "tls": "cluster/party"},
    )
    with pytest.raises(ConfigError, match=r"\[compute\] serves the vertical roles"):
        load_config(path)


def test_data_sparse_is_a_hosts_choice(tmp_path: Path) -> None:
    host = {"id": "host", "role": "host", "certs": "c", "listen": "127.0.0.1:1"}
    peers = {"guest": ""}
    config = load_config(write_config(tmp_path / "h.toml", host, peers=peers, data={"path": "h"}))
    assert config.data is not None
    assert config.data.sparse == "auto"
    config = load_config(
        write_config(tmp_path / "h.toml", host, peers=peers, data={"path": "h", "sparse": True})
    )
    assert config.data is not None
    assert config.data.sparse is True
    with pytest.raises(ConfigError, match=r"data\.sparse.*true, false or \"auto\""):
        load_config(
            write_config(tmp_path / "h.toml", host, peers=peers, data={"path": "h", "sparse": "y"})
        )
    with pytest.raises(ConfigError, match="only a host keeps its features sparse"):
        load_config(_guest(tmp_path, data={**DATA, "sparse": True}))


def test_horizontal_validation_keys(tmp_path: Path) -> None:
    client = {"id": "c1", "role": "client", "certs": "c"}
    peers = {"server": "wss://127.0.0.1:1"}
    data = {"path": "c1.csv", "label_column": "y", "valid_path": "c1-valid.csv"}
    train = {"eval_metric": "auc", "early_stopping_rounds": 5}
    config = load_config(
        write_config(tmp_path / "c.toml", client, peers=peers, data=data, train=train)
    )
    assert config.data is not None
    assert config.data.valid_path == tmp_path / "c1-valid.csv"
    assert (config.train.eval_metric, config.train.early_stopping_rounds) == ("auc", 5)
    with pytest.raises(ConfigError, match=r"\[train\]: eval_metric 'auc' ranks the scores"):
        load_config(
            write_config(
                tmp_path / "c.toml",
                client,
                peers=peers,
                data=data,
                train={**train, "objective": "reg:squarederror"},
            )
        )


def test_vertical_validation_keys(tmp_path: Path) -> None:
    """A vertical guest reads ``valid_path``, ``eval_metric`` and ``early_stopping_rounds``;
    early stopping without validation rows, or an unknown metric, is refused naming the key;
    a host may name its validation rows but not the guest's settings."""
    valid = {**DATA, "valid_path": "v.csv"}
    train = {"eval_metric": "auc", "early_stopping_rounds": 3}
    config = load_config(_guest(tmp_path, data=valid, train=train))
    assert config.data is not None
    assert config.data.valid_path == tmp_path / "v.csv"
    assert (config.train.eval_metric, config.train.early_stopping_rounds) == ("auc", 3)
    with pytest.raises(ConfigError, match=r"early_stopping_rounds watches the validation rows"):
        load_config(_guest(tmp_path, train=train))
    with pytest.raises(ConfigError, match=r"eval_metric: unknown metric 'acu'"):
        load_config(_guest(tmp_path, data=valid, train={"eval_metric": "acu"}))
    host = {"id": "host", "role": "host", "task": "train", "certs": "certs/host"}
    host_data = {"path": "host.csv", "valid_path": "hv.csv"}
    path = write_config(tmp_path / "h.toml", host, peers={"guest": ""}, data=host_data)
    with pytest.raises(ConfigError, match="listen"):  # only the dialing rule is left to fix
        load_config(path)
    path = write_config(
        tmp_path / "h.toml", {**host, "listen": "127.0.0.1:9"}, peers={"guest": ""}, data=host_data
    )
    assert load_config(path).data.valid_path == tmp_path / "hv.csv"  # type: ignore[union-attr]
    path = write_config(
        tmp_path / "h.toml",
        {**host, "listen": "127.0.0.1:9"},
        peers={"guest": ""},
        data=host_data,
        train={"early_stopping_rounds": 3},
    )
    with pytest.raises(ConfigError, match="early_stopping_rounds"):
        load_config(path)


def test_horizontal_privacy_keys(tmp_path: Path) -> None:
    """``allow_two_clients`` (each party) and ``share_statistics`` (the server) are read from
    ``[train]``, off unless set."""
    client = {"id": "c1", "role": "client", "certs": "c"}
    peers = {"server": "wss://127.0.0.1:1"}
    data = {"path": "c1.csv", "label_column": "y"}
    plain = load_config(write_config(tmp_path / "c.toml", client, peers=peers, data=data))
    assert (plain.train.allow_two_clients, plain.train.share_statistics) == (False, False)
    train = {"allow_two_clients": True, "share_statistics": True}
    config = load_config(
        write_config(tmp_path / "c.toml", client, peers=peers, data=data, train=train)
    )
    assert (config.train.allow_two_clients, config.train.share_statistics) == (True, True)


def test_a_hosts_train_values_are_refused_naming_the_guest(tmp_path: Path) -> None:
    host = {"id": "host", "role": "host", "certs": "c", "listen": "127.0.0.1:1"}
    own = {"psi": True, "eval_train": False, "model": "m.json", "memory_budget_mb": 64.0}
    path = write_config(tmp_path / "h.toml", host, peers={"guest": ""}, data={"path": "h"})
    kept = load_config(
        write_config(tmp_path / "h.toml", host, peers={"guest": ""}, data={"path": "h"}, train=own)
    )
    assert kept.train.memory_budget_mb == 64.0
    theirs = {**own, "n_estimators": 50, "key_bits": 4096}
    path = write_config(
        tmp_path / "h.toml", host, peers={"guest": ""}, data={"path": "h"}, train=theirs
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: [train] n_estimators, key_bits: the guest owns these")
    assert "remove them from this host's file and set them in the guest's" in message
    assert "may set only psi, eval_train, model" in message


def test_a_host_declares_constraints_on_its_own_features(tmp_path: Path) -> None:
    """A host's [train] may give its own features' directions by name (an inline table) and
    the run's interaction groups; they reach its training as BoostParams keep them."""
    host = {"id": "host", "role": "host", "certs": "c", "listen": "127.0.0.1:1"}
    groups = {"interaction_constraints": [["debt", "age"], ["income"]]}

    def write(directions: str) -> Path:
        path = write_config(
            tmp_path / "h.toml", host, peers={"guest": ""}, data={"path": "h"}, train=groups
        )
        path.write_text(path.read_text() + f"monotone_constraints = {directions}\n")
        return path

    config = load_config(write("{debt = 1, income = -1}"))
    assert config.train.params.monotone_constraints == {"debt": 1, "income": -1}
    assert config.train.params.interaction_constraints == (("debt", "age"), ("income",))
    with pytest.raises(ConfigError, match="monotone_constraints"):
        load_config(write("{debt = 2}"))


def test_private_inference_is_unset_unless_given(tmp_path: Path) -> None:
    """Unset: a guest scores with bits, a host follows the guest; set: the party's choice."""
    assert load_config(_guest(tmp_path)).predict.private is None
    config = load_config(_guest(tmp_path, predict={"private": True}, serve={"private": False}))
    assert config.predict.private is True
    assert config.serve.private is False


def test_the_task_picks_the_private_setting(tmp_path: Path) -> None:
    path = _guest(tmp_path, predict={"private": True}, serve={"private": False})
    assert load_config(path).with_task("predict").private_inference is True
    assert load_config(path).with_task("serve").private_inference is False
