"""On the host, no RDMA device needed: the wheel's NIXL (nixl-cu12 1.4.0) finds the plugin through
NIXL_PLUGIN_DIR, loads it (dlopen RTLD_NOW: every symbol resolves), reads its parameters and memory
types, and a backend with bad parameters fails in create_backend with NIXL's error and the
plugin's message naming the cause. `make nixl` runs it after nixl/check_abi.py."""

from __future__ import annotations

import pytest

import nixl_env


@pytest.fixture(scope="module")
def agent():
    nixl_agent, nixl_agent_config = nixl_env.nixl_api()
    return nixl_agent("load-check", nixl_agent_config(enable_prog_thread=False, backends=[]))


def test_plugin_found_and_loaded(agent):
    assert "HIPOBJ" in agent.get_plugin_list()
    assert set(agent.get_plugin_mem_types("HIPOBJ")) == {"DRAM_SEG", "VRAM_SEG", "OBJ_SEG"}
    params = agent.get_plugin_params("HIPOBJ")
    for name in ("endpoint_override", "scheme", "bucket", "access_key", "secret_key", "region", "ca_bundle",
                 "nics", "transport", "depth"):
        assert name in params, name
    assert params["transport"] == "env" and params["depth"] == "256"


@pytest.mark.parametrize(
    "given, cause",
    [
        ({"bucket": "b"}, "no endpoint: set the backend parameter endpoint_override"),
        ({"endpoint_override": "http://127.0.0.1:9"}, "no bucket: set the backend parameter bucket"),
        ({"endpoint_override": "http://127.0.0.1:9", "bucket": "b", "access_key": "a"},
         "access_key given without secret_key"),
        ({"endpoint_override": "http://127.0.0.1:9", "bucket": "b", "transport": "fast"},
         "transport 'fast': one of auto, rdma, http, env"),
        ({"endpoint_override": "http://127.0.0.1:9", "bucket": "b", "depth": "0"}, "depth '0': 1 to 4096"),
        ({"endpoint_override": "http://127.0.0.1:9", "bucket": "b", "use_virtual_addressing": "true"},
         "use_virtual_addressing 'true': hipObject addresses buckets by path only"),
        ({"endpoint_override": "http://127.0.0.1:9", "bucket": "b", "endpoint": "x"}, "unknown parameter 'endpoint'"),
    ],
)
def test_bad_parameters_fail_create_backend(agent, capfd, monkeypatch, given, cause):
    monkeypatch.delenv("AWS_ENDPOINT_OVERRIDE", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_BUCKET", raising=False)
    with pytest.raises(Exception) as err:
        agent.create_backend("HIPOBJ", given)
    assert str(err.value) == "NIXL_ERR_BACKEND"
    assert f"hipObject: {cause}" in capfd.readouterr().err
