"""Shared helpers: the built CLI, a numpy reimplementation of synth, and random
arrays of every dtype shardload supports."""

from __future__ import annotations

import gc
import os
import pathlib
from collections.abc import Iterator

# h5py must be imported before cupynumeric in a process: cuPyNumeric loads
# Legate's own HDF5 into the global symbol scope, and an h5py imported after
# that binds to it and fails ("Not a datatype"). conftest runs first.
import h5py
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The build the tests use: scripts/setup.sh makes build/ in the checkout (scripts/env.sh
# exports its path); nothing outside the checkout is looked for.
BUILD = pathlib.Path(os.environ.get("SHARDLOAD_BUILD", ROOT / "build"))


@pytest.fixture(autouse=True, scope="session")
def _collect_garbage_on_the_main_thread():
    """Legate ends the process when one of its arrays is freed on a thread other than the
    one that runs it. pytest keeps failed calls' tracebacks (and so the arrays in their
    frames) in reference cycles, and the cyclic collector runs on whichever thread happens
    to allocate: a zarr, pyarrow or h5py worker thread among them. The suite collects on
    the main thread only, between tests (see docs/errors.md, "Runtime limits")."""
    gc.disable()
    yield
    gc.unfreeze()  # what _collect_after_each_test froze, collected once more, here
    gc.collect()
    gc.enable()


@pytest.fixture(autouse=True)
def _collect_after_each_test():
    yield
    gc.collect()
    # What outlives a test is nearly all what lives for the whole session: the imported
    # modules, the collected tests, Legate's and the servers' state. A full collection walks
    # all of it, 0.1 to 1 s a test on this machine (a third of the suite's time and more);
    # frozen, the next one walks only what later tests make. Cyclic garbage among frozen
    # objects waits for the session's end, and is then still collected on the main thread.
    gc.freeze()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """An S3 server (moto) on 127.0.0.1 for the module, and the environment its clients use
    (the object-storage tests)."""
    import s3_server

    with s3_server.serving() as endpoint:
        yield endpoint


@pytest.fixture
def bucket(server: str):
    """A new bucket on that server (s3_server.Bucket)."""
    import s3_server

    return s3_server.Bucket(server)


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    path = BUILD / "shardload"
    if not path.exists():
        pytest.fail(f"{path} is not built; run scripts/setup.sh")
    return path


_M = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M
    return x ^ (x >> np.uint64(31))


def _real(h: np.ndarray, bits: int) -> np.ndarray:
    v = (h >> np.uint64(64 - bits)).astype(np.int64) - (1 << (bits - 1))
    return v.astype(np.float64) * 2.0**-8


def synth(dtype: str, seed: int, first: int, count: int) -> np.ndarray:
    """The documented value formula, written independently of the C++ one."""
    with np.errstate(over="ignore"):
        key = splitmix64(np.array([seed], dtype=np.uint64))[0]
        h = splitmix64(key + np.arange(first, first + count, dtype=np.uint64))
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return (h >> np.uint64(63)).astype(np.bool_)
    if dt.kind in "iu":
        return h.astype(dt)  # keeps the low bits, two's complement
    if dt.kind == "f":
        bits = {2: 11, 4: 24, 8: 53}[dt.itemsize]
        return _real(h, bits).astype(dt)
    bits = {8: 24, 16: 53}[dt.itemsize]
    with np.errstate(over="ignore"):
        h2 = splitmix64(h)
    return (_real(h, bits) + 1j * _real(h2, bits)).astype(dt)


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values spanning the whole range of integer types."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


def dirty_bools(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A bool array whose bytes are anything 0..255 (2 and 255 always among them),
    as a file may hold them: numpy keeps such bytes through views and tobytes."""
    raw = rng.integers(0, 256, size=shape, dtype=np.uint8)
    raw.reshape(-1)[:3] = [2, 255, 0][:raw.size]
    return raw.view(np.bool_)


def assert_bools_normalised(got: np.ndarray, stored: np.ndarray) -> None:
    """numpy's rule for a bool byte: nonzero is True, and True is stored as 1."""
    stored_bytes = np.ascontiguousarray(stored).view(np.uint8)
    assert stored_bytes.size == 0 or stored_bytes.max() > 1  # the data really is dirty
    assert got.dtype == np.bool_ and got.shape == stored.shape
    got_bytes = np.ascontiguousarray(got).view(np.uint8)
    assert got_bytes.size == 0 or got_bytes.max() <= 1
    np.testing.assert_array_equal(got_bytes, (stored_bytes != 0).astype(np.uint8))
    assert int(got_bytes.sum()) == np.count_nonzero(stored_bytes)


def corrupt_hdf5_chunk(path, dataset: str, index: int, keep_tail: int = 4) -> None:
    """Flips the bytes of one stored chunk, keeping its first 2 and last `keep_tail`
    bytes (a compressed stream's header and, with fletcher32, its checksum), so the
    file's metadata stays intact and only reading that chunk can tell."""
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
    raw = bytearray(pathlib.Path(path).read_bytes())
    for k in range(info.byte_offset + 2, info.byte_offset + info.size - keep_tail):
        raw[k] ^= 0x5A
    pathlib.Path(path).write_bytes(bytes(raw))



# ---- the slow tests: left out by scripts/test.sh --quick (pytest -m "not slow") ----------------
# Listed here rather than decorated where they are, so that one place says what the quick loop
# leaves out and why: each took several seconds (pytest --durations) and another test of the
# quick loop covers the same code more cheaply. "file.py" marks a whole module,
# "file.py::name" a test function (all its parameters).
SLOW: set[str] = {
    "test_api_info.py::test_h5py_imported_after_a_load_works",
    "test_batches.py::test_a_dataset_larger_than_legate_memory_iterates",
    "test_cli.py::test_a_malformed_source_is_a_usage_error_before_legate",
    "test_cli.py::test_an_option_given_twice_is_refused",
    "test_cli.py::test_empty_values_are_refused_as_python_refuses_them",
    "test_cli.py::test_every_command_has_help_listing_every_option",
    "test_cli.py::test_every_listed_option_is_accepted",
    "test_cli.py::test_every_option_takes_the_equals_form",
    "test_cli.py::test_help_inspect_and_usage_errors_do_not_start_legate",
    "test_cli.py::test_inspect_json_escapes_paths_that_are_not_utf8",
    "test_cli.py::test_inspect_json_matches_the_layout",
    "test_cli.py::test_inspect_of_several_sources_says_each_directory_is_a_source_of_its_own",
    "test_cli.py::test_inspect_prints_sizes_for_people",
    "test_cli.py::test_read_errors_use_the_command_line_spelling",
    "test_cli.py::test_read_prints_sizes_for_people",
    "test_cli.py::test_read_refuses_a_seed_it_would_not_use",
    "test_cli.py::test_read_refuses_more_dimensions_than_legate_holds",
    "test_cli.py::test_read_takes_the_source_as_an_argument",
    "test_cli.py::test_top_level_help_and_version",
    "test_cli.py::test_unknown_options_exit_2_naming_them_and_pointing_at_help",
    "test_cli.py::test_verify_groups_is_an_integer_as_every_other_option_takes_it",
    "test_cli.py::test_write_refuses_more_dimensions_than_legate_holds",
    "test_cli_read.py",
    "test_core.py::test_every_dtype_mixed_orders",
    "test_core.py::test_one_to_four_dimensions",
    "test_core.py::test_ten_thousand_small_shards",
    "test_core.py::test_write_removes_stale_shards_and_inspect",
    "test_core.py::test_write_values_match_the_formula",
    "test_discovery_auto.py::test_a_directory_of_numbered_shards_is_recognised",
    "test_docs_run.py::test_every_python_and_shell_block_runs",
    "test_feed.py::test_a_jax_training_loop_over_the_feed",
    "test_feed.py::test_jax_data_parallel_on_two_processes",
    "test_feed_torch.py::test_ddp_on_two_processes_equal_batches_each_sample_once_and_a_resume",
    "test_feed_torch.py::test_ddp_killed_mid_epoch_on_two_processes_resumes_on_three",
    "test_feed_torch.py::test_a_shard_changed_or_gone_under_ddp_fails_every_rank_without_a_hang",
    "test_fork_safety.py::"
        "test_a_child_forked_past_the_wait_for_arrows_s3_client_ends_with_its_status",
    "test_fork_safety.py::"
        "test_a_program_ending_while_a_daemon_thread_is_stuck_in_arrows_s3_client_ends_cleanly",
    "test_hdf5.py::test_coexists_with_legate_io_hdf5",
    "test_hdf5.py::test_every_dtype_layouts_and_byte_orders",
    "test_hdf5.py::test_gzip_missing_chunks_read_the_fill_value",
    "test_hdf5.py::test_gzip_shuffle_levels_byte_orders_every_dtype",
    "test_http_faults.py::test_ctrl_c_ends_the_cli_also_where_a_request_cannot_be_ended",
    "test_http_manifest.py::test_verify_over_s3_and_http",
    "test_legate_start.py::test_a_legate_that_cannot_start_is_one_runtime_start_error",
    "test_legate_start.py::test_an_uncaught_start_failure_prints_a_few_lines",
    "test_legate_start.py::"
        "test_the_stand_in_driver_counts_as_no_driver_and_gets_a_cpu_configuration",
    "test_load.py::test_one_hundred_thousand_shards",
    "test_load_formats.py::test_damaged_data_found_in_a_task",
    "test_load_formats.py::test_same_dataset_in_every_format_loads_equal",
    "test_manifest.py::test_cli_index_verify",
    "test_manifest.py::test_stale_manifest_falls_back_and_says_why",
    "test_memory.py",
    "test_parquet.py::test_cast_mixed_columns",
    "test_parquet.py::test_every_type_one_column",
    "test_parquet.py::test_several_columns_in_the_order_named",
    "test_parquet_arrays.py::test_fixed_size_lists_give_trailing_dimensions",
    "test_raw.py::test_sidecar_every_dtype_both_byte_orders",
    "test_readers.py::"
        "test_a_file_replaced_by_a_fifo_after_discovery_is_refused_before_read_opens_it",
    "test_readers.py::test_a_reader_calling_cupynumeric_is_a_clean_error",
    "test_rows_and_cast.py::test_rows_loads_every_range_as_numpy_slices_it",
    "test_runtime_limits.py::test_an_unhandled_ctrl_c_ends_the_process_as_python_does",
    "test_runtime_limits.py::test_ctrl_c_during_loads_is_a_keyboard_interrupt_after_the_load",
    "test_runtime_limits.py::test_ctrl_c_while_idle_after_a_load_is_a_keyboard_interrupt",
    "test_runtime_limits.py::test_load_off_the_main_thread_raises_runtime_error",
    "test_s3.py::test_a_refused_s3_url_then_a_region_look_up_ends_the_process_with_its_status",
    "test_s3_columnar.py::test_an_arrow_ipc_object_is_probed_from_its_footer_and_batch_metadata",
    "test_s3_columnar.py::test_an_arrow_ipc_objects_batches_are_fetched_several_at_once",
    "test_s3_save.py::test_ctrl_c_during_an_s3_save_publishes_no_manifest",
    "test_s3_save.py::"
        "test_shardload_write_to_s3_makes_the_objects_a_local_write_makes_and_read_verifies",
    "test_s3_signed.py::test_a_profiles_credential_process_is_run_here_and_signs",
    "test_s3_signed.py::test_an_instance_roles_credentials_take_the_signed_path",
    "test_s3_signed.py::test_role_credentials_near_their_expiry_are_fetched_again",
    "test_s3_store_cache.py",
    "test_s3_stream.py::"
        "test_the_store_look_ups_and_the_list_do_not_wait_for_the_manifests_answer",
    "test_save.py::test_a_failed_write_leaves_nothing",
    "test_save.py::test_a_reader_during_overwrites_never_sees_a_mix",
    "test_save.py::test_cli_write_is_a_save",
    "test_save.py::test_concurrent_saves_to_one_destination",
    "test_save.py::test_every_dtype",
    "test_save.py::test_layouts",
    "test_save_manifest.py::test_a_failed_save_leaves_no_manifest",
    "test_save_manifest.py::test_a_save_whose_manifest_cannot_be_written_leaves_nothing",
    "test_save_manifest.py::test_cli_write_has_a_manifest",
    "test_save_manifest.py::test_discovery_of_a_save_uses_its_manifest",
    "test_save_safety.py::test_a_kept_save_error_frees_no_legate_object_on_another_thread",
    "test_save_safety.py::test_ctrl_c_during_a_save_publishes_nothing",
    "test_save_safety.py::test_overwrite_refuses_a_users_file_inside_a_zarr_store",
    "test_secrets.py::test_shardload_read_hides_every_secret_form",
    "test_seed_compat.py::test_read_skips_verification_against_a_meta_json_it_did_not_write",
    "test_small_files.py::test_the_first_bad_tiny_shard_is_named",
    "test_small_files.py::test_twenty_thousand_tiny_shards_load",
    "test_special_files.py::test_huge_number_in_a_name_is_a_gap_found_quickly",
    "test_special_files.py::test_nul_in_a_path_is_refused",
    "test_special_files.py::test_shard_replaced_by_a_fifo_after_discovery",
    "test_special_files.py::test_special_file_of_unknown_extension_is_not_sniffed_open",
    "test_special_files.py::test_special_hdf5_external_file",
    "test_special_files.py::test_special_raw_sidecar",
    "test_special_files.py::test_special_shard_is_refused_at_discovery",
    "test_special_files.py::test_special_zarr_chunk",
    "test_special_files.py::test_special_zarr_metadata",
    "test_zarr.py::test_bad_metadata",
    "test_zarr.py::test_chunkings",
    "test_zarr.py::test_corrupt_chunk",
    "test_zarr.py::test_every_dtype",
    "test_zarr.py::test_missing_chunks_take_the_fill_value",
    "test_zarr.py::test_v2_codecs",
    "test_zarr.py::test_v3_codecs",
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: takes seconds; scripts/test.sh --quick leaves it out (conftest.SLOW)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    seen = set()
    for item in items:
        module = item.path.name
        name = f"{module}::{item.originalname}" if hasattr(item, "originalname") else item.nodeid
        for key in (module, name):
            if key in SLOW:
                item.add_marker(pytest.mark.slow)
                seen.add(key)
    # A renamed or removed test must not leave a stale entry behind: every entry whose module
    # was collected whole (this hook runs before -k and -m deselect) must have marked something.
    if any("::" in arg for arg in config.args):
        return
    modules = {item.path.name for item in items}
    stale = sorted(k for k in SLOW - seen if k.split("::")[0] in modules)
    if stale:
        raise pytest.UsageError(f"conftest.SLOW names tests that do not exist: {stale}")
