"""Shared fixtures: the real Hydra composition, shrunk, with outputs under tmp_path."""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from once import MadeOnce, made_under
from portblocks import port_blocks
from tinyconfig import TINY, compose_config

from meta.config import Config


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread in the test processes, as meta-train's default (torch_threads=1).

    Each pytest-xdist worker has a core; two threads each would make the workers' OpenMP
    threads wait on each other. Tests of two threads ask for them (`torch_threads(2)`).
    """
    torch.set_num_threads(1)
    if not hasattr(config, "workerinput"):  # once, in pytest-xdist's controller
        _compile_the_package()


def _compile_the_package() -> None:
    """Byte-compile the project once for the hundreds of processes the tests start.

    Under PYTHONDONTWRITEBYTECODE no process writes its bytecode, so each meta-train, meta-eval
    and build would compile the package from source again (half a second each on 2 cores).
    """
    if sys.flags.dont_write_bytecode:
        root = Path(__file__).resolve().parent.parent
        for package in ("meta", "envs", "hydra_plugins"):
            compileall.compile_dir(root / package, quiet=1)


LEFT_OUT_OF_THE_QUICK_LOOP = ("slow", "integration", "heavy")
"""Markers of the tests the quick loop (`-m quick`) leaves to the whole suite."""
HEAVY_UNMARKED = frozenset(
    {
        # seconds of stacked or grouped trainings and adaptations
        "test_joint_pretrainings_of_several_seeds_train_as_one_group_to_rounding",
        "test_stacked_adaptations_give_the_rows_of_each_adapted_alone",
        "test_with_workers_the_joint_pretrainings_train_side_by_side_to_the_same_bits",
        "test_fomaml_runs_spends_the_query_buffer_and_resumes_bitwise",
        "test_games_are_measured_by_win_rates_against_random_and_theta",
        "test_adam_epsilon_is_1e_7_where_mlagents_keeps_torchs_1e_8",
        "test_gradients_are_clipped_to_max_grad_norm_and_inf_is_mlagents_unclipped",
        "test_one_or_two_torch_threads_train_the_same_weights",
        "test_gradient_steps_at_the_default_sizes_fault_almost_no_pages_in",
        # worker processes
        "test_workers_take_the_matmul_precision_of_the_process_that_starts_them",
        "test_training_requests_give_the_same_weights_in_worker_processes",
        "test_calls_come_back_in_the_jobs_order",
        # a second of training or measuring each, whose modules a cheaper quick test calls:
        # resumes (test_resume_is_bitwise_identical_to_an_uninterrupted_run stays)
        "test_carried_optimizer_is_checkpointed_and_resumes_bitwise",
        "test_fresh_inner_optimizer_keeps_no_state_and_carry_changes_training",
        "test_same_seed_same_weights_other_seed_other_weights",
        "test_a_run_whose_configuration_names_them_resumes_and_evaluates",
        "test_three_families_meta_train_with_elo_and_resume_bitwise",
        "test_elo_is_written_per_summary_period_and_the_decisive_share_per_meta_step",
        # stacks (the cheaper stack tests of their modules stay)
        "test_carried_optimizer_states_at_different_steps_train_in_a_stack_as_alone",
        "test_measured_together_gives_the_rows_measured_alone",
        "test_a_stack_steps_its_scaled_mean_layers_as_mlagents_units_would",
        "test_buffer_normalisation_is_population_std_once_before_the_epochs",
        "test_per_dimension_log_probs_are_the_acting_policys_and_sum_to_its_joint",
        # statistics against rliable's, thousands of bootstrap draws
        "test_probability_of_improvement_is_rliables_number_to_the_bit",
        "test_intervals_cover_meta_training_where_rliables_per_run_intervals_do_not",
        "test_seed_level_given_rliables_draws_gives_rliables_interval",
        "test_a_start_never_better_than_its_baseline_has_probability_zero",
        # --verbose's traceback (the one-line refusals of the same run stay)
        "test_verbose_shows_the_traceback",
        "test_action_scale_steps_the_mean_layer_as_mlagents_units_would",
        "test_games_in_a_stack_train_each_with_its_own_ghost_as_alone",
        "test_the_default_schedule_choice_proposes_the_committed_studys_trials",
        "test_run_first_refuses_a_run_whose_procedure_is_outside_the_space",
        "test_the_library_runs_at_the_runs_matmul_precision_and_gives_the_callers_back",
        "test_force_starts_over",
        "test_resume_continues_in_the_stored_lesson",
        "test_a_member_of_pieces_trains_bitwise_the_same_whichever_others_share_its_stack",
        "test_snapshots_of_a_stack_are_those_of_each_training_alone",
        "test_tasks_stepped_as_one_core_train_bitwise_as_each_environment_by_itself",
        # meta-report on a sweep of four trainings: the quick loop's report is the one of
        # test_other_algorithms_and_task_distributions_are_separate_settings (shorter runs)
        "test_a_row_per_setting_seeds_pooled_and_the_runs_untouched",
        "test_bad_input_is_one_line_and_nothing_is_written",
        "test_run_ids_and_a_run_directory_report_beside_the_runs",
        "test_a_live_run_is_listed_as_running_up_to_its_last_commit",
        # meta-eval's refusal of a run without weights: test_missing_run_and_run_without_weights
        "test_cli_errors_are_one_line_and_write_nothing",
    }
)
"""Tests that train, measure or start workers for seconds, by name, where their modules do
not mark them heavy: left out of the quick loop as the marked ones are."""
FIRST_CASE_QUICK = frozenset(
    {
        # refusals: a whole meta-train or meta-eval each (five Hydra compositions, a second)
        "test_bad_input_is_one_line_exit_2_and_writes_nothing",
        "test_a_damaged_run_is_refused_in_one_line_before_any_write",
        "test_drift_on_resume_is_refused_naming_the_key",
        "test_a_path_for_a_run_id_is_refused_before_anything_is_touched",
        "test_every_key_naming_a_run_takes_names_only",
        "test_bad_procedures_are_one_line_exit_2_and_write_nothing",
        "test_bad_options_fail_before_any_work",
        "test_bad_self_play_input_is_refused_before_the_run_exists",
        "test_bad_search_options_are_refused",
        "test_a_storage_that_cannot_serve_the_search_stops_it_before_training",
        "test_a_misspelled_key_gets_one_line_naming_the_nearest",
        "test_bad_curricula_fail_before_anything_is_written",
        "test_another_network_is_refused_in_one_line_before_anything_is_written",
        "test_games_and_settings_fomaml_cannot_honour_are_refused",
        "test_a_group_that_cannot_run_is_refused_in_one_line_writing_nothing",
        "test_bad_runtime_keys_are_one_line_exit_2_and_write_nothing",
        # the manual's commands, page by page (README.md's in the quick loop)
        "test_every_command_of_the_manual_composes",
        # trainings, one per option or algorithm
        "test_buffers_of_pieces_in_a_stack_train_each_as_alone",
        "test_an_option_in_a_stack_of_three_trains_each_as_alone",
        "test_a_stack_of_one_is_a_member_of_a_stack_to_the_tolerance",
        "test_bootstrap_ci_given_rliables_draws_gives_rliables_interval",
        "test_baselines_run_and_spend_reptiles_budget",
    }
)
"""Parametrized tests of which the quick loop runs the first case only: each case goes through
the same entry function and modules and costs a second; the whole suite runs every case."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `quick` every test that starts no process, trains for no more than a moment and
    needs no Ray cluster (one takes seconds to start): the loop run before each commit. Of the
    tests in FIRST_CASE_QUICK, the first case only.

    Before `-m` selects (pytest's own hook runs after the conftests' ones).
    """
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            continue
        name = getattr(item, "originalname", item.name)
        if name in HEAVY_UNMARKED:
            continue
        callspec = getattr(item, "callspec", None)
        if name in FIRST_CASE_QUICK and callspec and any(callspec.indices.values()):
            continue
        if not any(item.get_closest_marker(name) for name in LEFT_OUT_OF_THE_QUICK_LOOP):
            item.add_marker(pytest.mark.quick)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test of an xdist_group that pytest-xdist's --dist loadgroup did not keep together.

    Spread over workers, a group (the Ray tests' one cluster) would still pass, only slower:
    pytest 9.2 broke the grouping silently (pytest-dev/pytest-xdist#1386), hence the dev
    extra's pin; this says so instead.
    """
    grouped = getattr(item.config.option, "loadgroup", False)
    if grouped and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail(
            f"pytest-xdist ran this test outside its xdist_group under pytest {pytest.__version__}"
            ": install the dev extra's pytest (pip install -e '.[dev]')",
            pytrace=False,
        )


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., Config]:
    """A factory of tiny configs writing under tmp_path."""

    def make(*overrides: str) -> Config:
        return compose_config([*TINY, f"results_dir={tmp_path / 'results'}", *overrides])

    return make


@pytest.fixture(scope="session")
def made_once(tmp_path_factory: pytest.TempPathFactory) -> MadeOnce:
    """A function: `made_once(name, make)`, the directory `name` filled by `make(directory)`
    once per session for every worker (tests/once.py), for runs or builds tests only read; a
    test that writes works on a copy."""
    return made_under(tmp_path_factory.getbasetemp())


@pytest.fixture
def free_ports() -> Iterator[Callable[..., int]]:
    """A function: the first of `count` consecutive TCP ports this test holds alone on the
    machine (tests/portblocks.py), not ones that merely nobody listened on a moment ago."""
    with port_blocks() as take:
        yield take


PLAIN_ENV = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
"""The environment without the variables that would make rich colour a piped console."""


def _meta_train(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meta", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**PLAIN_ENV, "WANDB_MODE": "offline"},
    )


@pytest.fixture
def meta_train() -> Callable[..., subprocess.CompletedProcess[str]]:
    """A function: `meta-train <args>` run as a process in `cwd`, wandb offline, output kept."""
    return _meta_train
