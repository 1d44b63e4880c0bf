"""Hardware models: facts with sources, lookup by name, and one-line errors for unknown names."""

import pytest

from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.hw import MODELS, HardwareModel, generic_nvidia, get_model, known_names
from swizzlelab.runtime import cuda_available


def test_h100_facts():
    h100 = get_model("h100")
    assert (h100.n_units, h100.n_domains, h100.l2_partitions) == (132, 1, 2)
    assert h100.l2_bytes_per_domain == 50 * 1024 * 1024
    assert (h100.line_bytes, h100.sector_bytes, h100.sectors_per_line) == (128, 32, 4)
    assert h100.dispatch == "in_order"
    assert h100.dram_bw_bytes_per_s == pytest.approx(3.35e12)
    assert h100.l2_lines_per_partition == 25 * 1024 * 1024 // 128


def test_amd_models_split_units_over_xcds():
    mi300x = get_model("MI300X")
    assert (mi300x.n_units, mi300x.n_domains, mi300x.units_per_domain) == (304, 8, 38)
    assert mi300x.dispatch == "round_robin_domains"
    assert mi300x.l2_bytes_per_domain == 4 * 1024 * 1024 and mi300x.l2_total_bytes == 32 * 1024 * 1024
    mi355x = get_model("mi355x")
    assert (mi355x.n_units, mi355x.units_per_domain) == (256, 32)


def test_every_model_names_its_source_and_is_frozen():
    for model in MODELS:
        assert len(model.source) > 40
        assert get_model(model.name) is model
        with pytest.raises(Exception):
            model.n_units = 1  # type: ignore[misc]


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(UserError) as err:
        get_model("a100-pcie")
    message = str(err.value)
    assert "\n" not in message
    for name in known_names():
        assert name in message


def test_inconsistent_model_is_rejected():
    with pytest.raises(UserError):
        HardwareModel("bad", "x", 10, 3, 3, 1024, 128, 32, "in_order", 1.0, "test")
    with pytest.raises(UserError):
        HardwareModel("bad", "x", 4, 1, 4, 1024, 128, 32, "sideways", 1.0, "test")


def test_generic_nvidia_and_effective_override():
    model = generic_nvidia("Some GPU", 108, 40 * 1024 * 1024)
    assert model.n_units == 108 and model.l2_partitions == 2
    smaller = model.with_l2_effective_bytes(10 * 1024 * 1024)
    assert smaller.l2_lines_per_partition == 10 * 1024 * 1024 // 2 // 128
    with pytest.raises(UserError):
        generic_nvidia("x", 0, 1)


@pytest.mark.skipif(cuda_available(), reason="checks the no-GPU message")
def test_device_model_without_gpu_is_a_user_error():
    with pytest.raises(NoGpuError):
        get_model("device")


@pytest.mark.gpu
def test_device_model_on_gpu():
    model = get_model("device")
    assert model.n_units > 0 and model.l2_bytes_per_domain > 0


def test_blocks_per_sm_of_the_h100_matmul_config():
    from swizzlelab.hw import nvidia_blocks_per_sm

    smem = 3 * (128 * 64 + 64 * 128) * 2  # 3 stages of fp16 A and B tiles = 96 KiB
    assert nvidia_blocks_per_sm(128, smem, 8) == 2  # 65536 / (128*256) = 2 and 228 KiB / 97 KiB = 2
    assert nvidia_blocks_per_sm(168, smem, 8) == 1  # 168 regs -> 43008 per block, only one fits
    assert nvidia_blocks_per_sm(32, 0, 4) == 16  # thread limit: 2048 / 128
    with pytest.raises(UserError):
        nvidia_blocks_per_sm(255, 300_000, 8)
