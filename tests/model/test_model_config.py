"""The config registry and ModelConfig validation."""
import pytest

from course_lib.model import CONFIGS, ModelConfig, get_config


def test_registry_has_the_shipped_and_test_configs():
    assert {"tinychat", "test-mha", "test-gqa", "test-mqa"} <= set(CONFIGS)
    heads = {name: (CONFIGS[name].n_heads, CONFIGS[name].n_kv_heads) for name in ("test-mha", "test-gqa", "test-mqa")}
    assert heads == {"test-mha": (4, 4), "test-gqa": (4, 2), "test-mqa": (4, 1)}


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError) as err:
        get_config("tinychatt")
    for name in CONFIGS:
        assert name in str(err.value)


def test_get_config_returns_an_independent_copy():
    cfg = get_config("tinychat")
    cfg.n_layers = 99
    assert get_config("tinychat").n_layers != 99
    assert get_config("tinychat", n_layers=2).n_layers == 2
    with pytest.raises(TypeError):
        CONFIGS["new"] = cfg  # the registry is read-only


def test_head_dim_defaults_and_round_trip():
    cfg = get_config("tinychat")
    assert cfg.head_dim == cfg.d_model // cfg.n_heads
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("bad", [
    dict(n_heads=6, n_kv_heads=4),       # not a multiple
    dict(d_model=100, n_heads=3),        # not divisible, no head_dim
    dict(n_layers=0),
    dict(vocab_size=2.5),
    dict(head_dim=7),                    # odd: RoPE pairs need even
    dict(rope_theta=-1.0),
])
def test_invalid_configs_raise(bad):
    with pytest.raises(ValueError):
        get_config("test-mha", **bad)


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown ModelConfig fields"):
        ModelConfig.from_dict({**get_config("test-mha").to_dict(), "n_experts": 8})


def test_overriding_the_width_rederives_a_derived_head_dim():
    from course_lib.model import get_config

    base = get_config("tinychat")
    wider = get_config("tinychat", d_model=base.d_model * 2)
    assert wider.head_dim == wider.d_model // wider.n_heads == base.head_dim * 2
    assert get_config("tinychat", n_heads=base.n_heads // 2).head_dim == base.head_dim * 2
    assert get_config("tinychat", d_model=base.d_model * 2, head_dim=8).head_dim == 8
